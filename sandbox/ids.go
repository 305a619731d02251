//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/api"
)

// IDRange is a block of host ids, First through Last inclusive, that
// containers run as. Each live container holds one id of its own as both
// its uid and its gid, so a contained command shares no identity with a
// host account or with another container: not its RLIMIT_NPROC count,
// not the right to signal or ptrace, not file ownership.
type IDRange struct {
	First, Last uint32
}

// DefaultIDRange is 0x7F000000–0x7F00FFFF (2130706432–2130771967), 65536
// ids. It lies in the block systemd documents as unused
// (1879048192–2147352575; systemd.io/UIDS-GIDS): above its container
// ranges (524288–1879048191, nspawn and nsresourced), below its foreign
// range (0x7FFE0000–0x7FFEFFFF), far above distributions' accounts,
// homed (60001–60513) and DynamicUser= (61184–65519), and below 2^31,
// where tools that keep uids in a signed int break.
var DefaultIDRange = IDRange{First: 0x7F000000, Last: 0x7F00FFFF}

const (
	// minRangeID: below 65536 distributions, useradd and systemd (homed,
	// DynamicUser=) allocate accounts, some of them after sluiced starts.
	minRangeID = 1 << 16
	// maxRangeID: ids from 2^31 up break tools that keep uids in a signed
	// 32-bit int (systemd.io/UIDS-GIDS calls them unsafe).
	maxRangeID = 1<<31 - 1
	// minFreeIDs is the fewest usable ids a range must hold.
	minFreeIDs = 2
)

// ParseIDRange reads "START-END" (decimal, or hex with 0x), inclusive.
func ParseIDRange(s string) (IDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return IDRange{}, fmt.Errorf("uid range %q: want START-END, e.g. %s", s, DefaultIDRange)
	}
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 0, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 0, 32)
	if err := errors.Join(err1, err2); err != nil {
		return IDRange{}, fmt.Errorf("uid range %q: want START-END, e.g. %s: %w", s, DefaultIDRange, err)
	}
	r := IDRange{First: uint32(first), Last: uint32(last)}
	return r, r.Validate()
}

// Validate checks the range's bounds; whether host accounts use its ids
// is checked when a Runner starts.
func (r IDRange) Validate() error {
	switch {
	case r.First > r.Last:
		return fmt.Errorf("uid range %s: START is above END", r)
	case r.First < minRangeID:
		return fmt.Errorf("uid range %s: starts below %d, where distributions and systemd allocate accounts; the default is %s", r, minRangeID, DefaultIDRange)
	case r.Last > maxRangeID:
		return fmt.Errorf("uid range %s: ends above %d; ids from 2^31 break tools that keep uids signed", r, maxRangeID)
	case r.Size() < minFreeIDs:
		return fmt.Errorf("uid range %s: holds %d ids, want at least %d", r, r.Size(), minFreeIDs)
	}
	return nil
}

// Size is how many ids the range holds.
func (r IDRange) Size() uint64 { return uint64(r.Last) - uint64(r.First) + 1 }

func (r IDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Set parses s into r (flag.Value).
func (r *IDRange) Set(s string) error {
	v, err := ParseIDRange(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// IDsExhaustedError is Create's error when every id of the range is held
// by a live container (or by a host account).
type IDsExhaustedError struct {
	Range IDRange
	Live  int // ids held by live containers
}

// Reason is busy: like a full admission queue, nothing ran and a retry
// may succeed once a container is destroyed.
func (e *IDsExhaustedError) Reason() api.Reason { return api.ReasonBusy }

func (e *IDsExhaustedError) Error() string {
	return fmt.Sprintf("no free container uid: all of %s is held (%d by live containers, the rest by host accounts); widen --uid-range or lower pool sizes", e.Range, e.Live)
}

// span is an inclusive run of ids.
type span struct{ first, last uint32 }

// hostIDs is what the host's account files claim: every uid and gid in
// passwd and group (uid == gid in a container, so either one rules an id
// out), and the subordinate ranges delegated to users' user namespaces,
// whose processes run as those host ids.
type hostIDs struct {
	spans []span            // sorted, merged
	names map[uint32]string // who claims each entry's first id, for messages
}

// Host account files; variables so tests can point them elsewhere.
var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
	subuidFile = "/etc/subuid"
	subgidFile = "/etc/subgid"
)

func readHostIDs() (*hostIDs, error) {
	h := &hostIDs{names: map[uint32]string{}}
	add := func(first, last uint64, name string) {
		if first > last || first > 1<<32-1 {
			return
		}
		last = min(last, 1<<32-1)
		h.spans = append(h.spans, span{uint32(first), uint32(last)})
		if _, ok := h.names[uint32(first)]; !ok {
			h.names[uint32(first)] = name
		}
	}
	var errs []error
	// passwd: name:x:uid:gid:…; group: name:x:gid:…
	errs = append(errs, scanColon(passwdFile, func(f []string) {
		for _, i := range []int{2, 3} {
			if len(f) > i {
				if id, err := strconv.ParseUint(f[i], 10, 32); err == nil {
					add(id, id, "user "+f[0])
				}
			}
		}
	}))
	errs = append(errs, scanColon(groupFile, func(f []string) {
		if len(f) > 2 {
			if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				add(id, id, "group "+f[0])
			}
		}
	}))
	// subuid, subgid: name:start:count
	for _, file := range []string{subuidFile, subgidFile} {
		err := scanColon(file, func(f []string) {
			if len(f) == 3 {
				start, err1 := strconv.ParseUint(f[1], 10, 32)
				n, err2 := strconv.ParseUint(f[2], 10, 32)
				if err1 == nil && err2 == nil && n > 0 {
					add(start, start+n-1, "subordinate ids of "+f[0])
				}
			}
		})
		if errors.Is(err, os.ErrNotExist) {
			err = nil // no user namespaces delegated
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h.spans = mergeSpans(h.spans)
	return h, nil
}

// scanColon calls fn with the fields of each line of a colon-separated
// account file, skipping comments and NIS "+"/"-" lines.
func scanColon(file string, fn func([]string)) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("read host accounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		fn(strings.Split(line, ":"))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	return nil
}

func mergeSpans(s []span) []span {
	sort.Slice(s, func(i, j int) bool { return s[i].first < s[j].first })
	var out []span
	for _, x := range s {
		if n := len(out); n > 0 && uint64(x.first) <= uint64(out[n-1].last)+1 {
			out[n-1].last = max(out[n-1].last, x.last)
			continue
		}
		out = append(out, x)
	}
	return out
}

// within returns the parts of spans inside r.
func within(spans []span, r IDRange) []span {
	var out []span
	for _, s := range spans {
		if s.last < r.First || s.first > r.Last {
			continue
		}
		out = append(out, span{max(s.first, r.First), min(s.last, r.Last)})
	}
	return out
}

func count(spans []span) uint64 {
	var n uint64
	for _, s := range spans {
		n += uint64(s.last) - uint64(s.first) + 1
	}
	return n
}

// idAlloc hands out the ids of a range, lowest free first (so the
// per-id /etc dirs stay few), never one that a host account holds or a
// live container already has. Ids the account files do not name are
// also looked up in the user database (os/user, so NSS: LDAP, sssd,
// nss-systemd) once, the first time they would be handed out: a range
// cannot be enumerated there, and this costs two lookups per id ever
// used rather than 131072 at start.
type idAlloc struct {
	rng    IDRange
	lookup func(id uint32) (owner string, err error) // "" when no account has id

	mu      sync.Mutex
	skip    []span // sorted, merged: host-held ids inside rng
	taken   map[uint32]struct{}
	checked map[uint32]struct{} // looked up and found free
}

func newIDAlloc(rng IDRange, host *hostIDs, lookup func(uint32) (string, error)) (*idAlloc, error) {
	if err := rng.Validate(); err != nil {
		return nil, err
	}
	a := &idAlloc{rng: rng, lookup: lookup, skip: within(host.spans, rng),
		taken: map[uint32]struct{}{}, checked: map[uint32]struct{}{}}
	held := count(a.skip)
	free := rng.Size() - held
	if free < minFreeIDs || held > rng.Size()/2 {
		var ids []uint32
		for id := range host.names {
			if rng.First <= id && id <= rng.Last {
				ids = append(ids, id)
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		var who []string
		for _, id := range ids[:min(len(ids), 4)] {
			who = append(who, fmt.Sprintf("%d: %s", id, host.names[id]))
		}
		return nil, fmt.Errorf("uid range %s: host accounts hold %d of its %d ids (%s); choose a range no host account or /etc/subuid entry uses (the default is %s)",
			rng, held, rng.Size(), strings.Join(who, ", "), DefaultIDRange)
	}
	return a, nil
}

// skipped is how many ids of the range host accounts hold.
func (a *idAlloc) skipped() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return count(a.skip)
}

// take returns the lowest free id, now held until give.
func (a *idAlloc) take() (uint32, error) {
	for {
		a.mu.Lock()
		id, ok := a.lowestFree()
		if !ok {
			live := len(a.taken)
			a.mu.Unlock()
			return 0, &IDsExhaustedError{Range: a.rng, Live: live}
		}
		a.taken[id] = struct{}{}
		_, checked := a.checked[id]
		a.mu.Unlock()
		if checked || a.lookup == nil {
			return id, nil
		}
		// Looked up outside the lock: a slow directory delays only this
		// Create. The id is held meanwhile, so no one else takes it.
		owner, err := a.lookup(id)
		a.mu.Lock()
		switch {
		case err != nil:
			delete(a.taken, id) // fail closed; try it again next time
			a.mu.Unlock()
			return 0, fmt.Errorf("check uid %d against the host's user database: %w", id, err)
		case owner != "":
			delete(a.taken, id)
			a.skip = mergeSpans(append(a.skip, span{id, id}))
			a.mu.Unlock()
			continue
		}
		a.checked[id] = struct{}{}
		a.mu.Unlock()
		return id, nil
	}
}

// lowestFree finds the lowest id neither skipped nor taken: O(skipped
// spans + live containers). a.mu is held.
func (a *idAlloc) lowestFree() (uint32, bool) {
	id := uint64(a.rng.First)
	si := 0
	for id <= uint64(a.rng.Last) {
		for si < len(a.skip) && uint64(a.skip[si].last) < id {
			si++
		}
		if si < len(a.skip) && uint64(a.skip[si].first) <= id {
			id = uint64(a.skip[si].last) + 1
			continue
		}
		if _, held := a.taken[uint32(id)]; held {
			id++
			continue
		}
		return uint32(id), true
	}
	return 0, false
}

// give returns id; the caller has made sure nothing runs as it.
func (a *idAlloc) give(id uint32) {
	a.mu.Lock()
	delete(a.taken, id)
	a.mu.Unlock()
}

// held reports whether id is held now.
func (a *idAlloc) held(id uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.taken[id]
	return ok
}

// lookupHostID asks the user database (os/user: NSS with cgo) whether a
// user or group has id.
func lookupHostID(id uint32) (string, error) {
	s := strconv.FormatUint(uint64(id), 10)
	u, err := user.LookupId(s)
	if err == nil {
		return "user " + u.Username, nil
	}
	if !errors.As(err, new(user.UnknownUserIdError)) {
		return "", err
	}
	g, err := user.LookupGroupId(s)
	if err == nil {
		return "group " + g.Name, nil
	}
	if !errors.As(err, new(user.UnknownGroupIdError)) {
		return "", err
	}
	return "", nil
}
