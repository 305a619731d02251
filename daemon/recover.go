//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
)

// Recovery of interrupted writes (docs/design.md §3, "Writes and a
// crash").
//
// A write's temporary name is fileop.TempPrefix + its call id, created
// only after its decision record is durable; that record names the call
// and the parent (each resolved root's root_path and rel). So a write
// that had a temp file when the daemon died is an allowed write decision
// with no result record after it, and its temp file is found from the
// record alone: no journal of its own, no sync of its own.
//
// The scan is bounded by the daemon's runs. Every start appends a
// policy_loaded record ("start: …") only after this sweep is done, so a
// crashed run's writes all lie after the last start record: the scan
// reads the ledger backward to that record, then forward from it. A
// clean stop (every call ended) leaves a marker in the state dir naming
// the ledger's size and last bytes; a start that finds the ledger exactly
// as the marker says skips the scan.

// cleanStopFile is the clean-stop marker, in the state dir.
const cleanStopFile = "clean-stop"

// legacyJournal is the temp journal of sluiced before the call-id temp
// names; a start sweeps what it lists once, then removes it.
const legacyJournal = "write-temps.jsonl"

// ledgerMark identifies the ledger's end: its size and a digest of its
// last 256 bytes.
func ledgerMark(ledgerPath string) (string, error) {
	f, err := os.Open(ledgerPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	n := min(fi.Size(), 256)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, fi.Size()-n); err != nil && err != io.EOF {
		return "", err
	}
	sum := sha256.Sum256(buf)
	return strconv.FormatInt(fi.Size(), 10) + " " + hex.EncodeToString(sum[:]) + "\n", nil
}

// writeCleanStop records, after the ledger is closed on a clean stop,
// where it ended. Written by rename and not synced: a marker lost in a
// crash only means the next start scans.
func writeCleanStop(stateDir, ledgerPath string) error {
	mark, err := ledgerMark(ledgerPath)
	if err != nil {
		return err
	}
	p := filepath.Join(stateDir, cleanStopFile)
	if err := os.WriteFile(p+".new", []byte(mark), 0o600); err != nil {
		return err
	}
	return os.Rename(p+".new", p)
}

// stoppedCleanly says whether the ledger ends where the clean-stop marker
// says, and removes the marker (this run is not stopped yet).
func stoppedCleanly(stateDir, ledgerPath string) bool {
	p := filepath.Join(stateDir, cleanStopFile)
	want, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	os.Remove(p)
	got, err := ledgerMark(ledgerPath)
	return err == nil && got == string(want)
}

// pendingWrite is an allowed write decision without a result record.
type pendingWrite struct {
	callID string
	temps  []string // candidate temp paths beneath base: one per resolved root
}

// scanRec is what the scan decodes of a record.
type scanRec struct {
	CallID    string          `json:"call_id"`
	Kind      string          `json:"kind"`
	Operation string          `json:"operation"`
	Verdict   string          `json:"verdict"`
	Detail    string          `json:"detail"`
	Resolved  json.RawMessage `json:"resolved"`
}

var (
	kindDecision = []byte(`"kind":"decision"`)
	kindResult   = []byte(`"kind":"result"`)
	kindPolicy   = []byte(`"kind":"policy_loaded"`)
)

// tempOps are the `"operation":"NAME"` of each operation whose commit
// leaves a temp file beside its target (opSpec.tempName): the decisions
// the scan decodes.
func tempOps() [][]byte {
	var out [][]byte
	for name, o := range operations {
		if o.tempName != nil {
			out = append(out, []byte(`"operation":`+strconv.Quote(string(name))))
		}
	}
	return out
}

func containsAny(line []byte, pats [][]byte) bool {
	for _, p := range pats {
		if bytes.Contains(line, p) {
			return true
		}
	}
	return false
}

// scanChunk is how much the backward scan reads at a time (tests make it
// small, so records straddle reads).
var scanChunk = 1 << 20

// isStart says whether line is a start's policy_loaded record.
func isStart(line []byte) bool {
	if !bytes.Contains(line, kindPolicy) {
		return false
	}
	var r scanRec
	return json.Unmarshal(line, &r) == nil && r.Kind == audit.KindPolicyLoaded && strings.HasPrefix(r.Detail, "start: ")
}

// lastStartOffset reads f (size bytes of whole records) backward and
// returns the offset just past the last start record, or 0 if none.
func lastStartOffset(f *os.File, size int64) (int64, error) {
	chunk := int64(scanChunk)
	end := size
	var carry []byte // the start of a line whose beginning is in an earlier chunk
	for end > 0 {
		start := max(end-chunk, 0)
		buf := make([]byte, end-start, end-start+int64(len(carry)))
		if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
			return 0, err
		}
		buf = append(buf, carry...)
		// Lines wholly in buf: those after its first '\n' (or all, at 0).
		for {
			i := bytes.LastIndexByte(buf[:max(len(buf)-1, 0)], '\n')
			if i < 0 {
				break
			}
			line := buf[i+1:]
			if isStart(line) {
				return start + int64(i+1) + int64(len(line)), nil
			}
			buf = buf[:i+1]
		}
		if start == 0 {
			if isStart(buf) {
				return int64(len(buf)), nil
			}
			return 0, nil
		}
		carry = append([]byte(nil), buf...)
		end = start
	}
	return 0, nil
}

// pendingWrites scans the ledger from the last start record to its end
// for allowed write decisions with no result record.
func pendingWrites(ledgerPath string) ([]pendingWrite, error) {
	f, err := os.Open(ledgerPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	from, err := lastStartOffset(f, fi.Size())
	if err != nil {
		return nil, err
	}
	// Only the writes still pending are kept: memory is bounded by the
	// writes in flight at the crash, not by the run's.
	pending := map[string]*pendingWrite{}
	ops := tempOps()
	br := bufio.NewReaderSize(io.NewSectionReader(f, from, fi.Size()-from), 1<<20)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A record longer than the buffer: read it whole.
			rest, err2 := br.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		if len(line) > 0 {
			isDecision := bytes.Contains(line, kindDecision) && containsAny(line, ops)
			isResult := !isDecision && len(pending) > 0 && bytes.Contains(line, kindResult)
			if id, ok := resultCallID(line); isResult && ok {
				delete(pending, id) // the common case, without a decode
			} else if isDecision || isResult {
				var r scanRec
				if json.Unmarshal(line, &r) == nil && r.CallID != "" {
					o := operations[api.Operation(r.Operation)]
					switch {
					case r.Kind == audit.KindDecision && o != nil && o.tempName != nil && r.Verdict == "allow":
						pw := &pendingWrite{callID: r.CallID}
						for _, target := range o.ResolvedFromRecord(r.Resolved) {
							for _, res := range target {
								if res.Outcome == authz.OutcomeOK && res.RootPath != "" && res.Rel != "" {
									pw.temps = append(pw.temps, path.Join(res.RootPath, path.Dir(res.Rel), o.tempName(r.CallID)))
								}
							}
						}
						pending[r.CallID] = pw
					case r.Kind == audit.KindResult:
						delete(pending, r.CallID)
					}
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	out := make([]pendingWrite, 0, len(pending))
	for _, pw := range pending {
		out = append(out, *pw)
	}
	// Call ids are ULIDs: in the order the calls came.
	slices.SortFunc(out, func(a, b pendingWrite) int { return strings.Compare(a.callID, b.callID) })
	return out, nil
}

// resultCallID reads a result record's call id from the front of its
// line, as the ledger writes it (keys in order, compact): `{"call_id":"ID"`,
// an optional `,"detail":"…"`, then `,"kind":"result"`. Anything else is
// not ok, and the caller decodes the line.
func resultCallID(line []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(`{"call_id":"`))
	if !ok {
		return "", false
	}
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return "", false
	}
	id, rest := string(rest[:i]), rest[i+1:]
	if r, ok := bytes.CutPrefix(rest, []byte(`,"detail":"`)); ok {
		// skip the string: to the first quote not escaped
		j := 0
		for ; j < len(r) && r[j] != '"'; j++ {
			if r[j] == '\\' {
				j++
			}
		}
		if j >= len(r) {
			return "", false
		}
		rest = r[j+1:]
	}
	if !bytes.HasPrefix(rest, []byte(`,"kind":"result"`)) {
		return "", false
	}
	return id, true
}

// removeTemp removes one temp path beneath base (openat2 resolution of
// its parent, then fileop.RemoveTemp on the parent's fd: only a regular
// file with the temp prefix). A name that is not there is not an error.
func removeTemp(base *securefs.Root, p string) (bool, error) {
	pp, err := fileop.ResolveParent(base, p)
	if errors.Is(err, securefs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer pp.Close()
	err = fileop.RemoveTemp(pp, pp.Name)
	if errors.Is(err, securefs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// recoverWrites removes the temp files of the writes a crash interrupted
// (see above) and appends a recovered record for each one it removed;
// the start record that follows syncs them. It runs after the ledger is
// open and before the start's policy_loaded record.
func (d *Daemon) recoverWrites(base *securefs.Root, ledgerPath string) error {
	d.sweepLegacyJournal(base)
	if stoppedCleanly(d.cfg.StateDir, ledgerPath) {
		return nil
	}
	pws, err := pendingWrites(ledgerPath)
	if err != nil {
		return fmt.Errorf("scan the audit ledger for interrupted writes: %w", err)
	}
	for _, pw := range pws {
		for _, tp := range pw.temps {
			removed, err := removeTemp(base, tp)
			if err != nil {
				d.log.Warn("could not remove the temp file of an interrupted write", "call_id", pw.callID, "path", tp, "err", err)
				continue
			}
			if !removed {
				continue
			}
			d.log.Warn("removed the temp file of an interrupted write", "call_id", pw.callID, "path", tp)
			if _, err := d.ledger.Append(&audit.Record{Kind: audit.KindRecovered, CallID: pw.callID,
				Detail: "removed the temp file of an interrupted write: " + tp}); err != nil {
				return fmt.Errorf("audit recovered: %w", err)
			}
		}
	}
	return nil
}

// sweepLegacyJournal sweeps the temp journal an older sluiced kept, if
// one is there: the names it lists as made and not finished, each
// resolved beneath base. Then it removes the journal.
func (d *Daemon) sweepLegacyJournal(base *securefs.Root) {
	p := filepath.Join(d.cfg.StateDir, legacyJournal)
	b, err := os.ReadFile(p)
	if err != nil {
		return
	}
	pending := map[string]bool{}
	var order []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e struct{ Op, Path string }
		if json.Unmarshal(line, &e) != nil {
			continue // a torn last line
		}
		switch e.Op {
		case "add":
			if !pending[e.Path] {
				order = append(order, e.Path)
			}
			pending[e.Path] = true
		case "done":
			delete(pending, e.Path)
		}
	}
	for _, tp := range order {
		if pending[tp] {
			if removed, _ := removeTemp(base, tp); removed {
				d.log.Warn("removed a temp file an interrupted write left (old journal)", "path", tp)
			}
		}
	}
	if err := os.Remove(p); err == nil {
		if dir, err := os.Open(d.cfg.StateDir); err == nil {
			unix.Fsync(int(dir.Fd()))
			dir.Close()
		}
	}
}
