//go:build linux

// Package recovery finds, from the audit ledger alone, the writes a crash
// interrupted, and removes their temporary files beneath the manifest's
// base.
package recovery

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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

// CleanStopFile is the clean-stop marker, in the state dir.
const CleanStopFile = "clean-stop"

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

// WriteCleanStop records, after the ledger is closed on a clean stop,
// where it ended. Written by rename and not synced: a marker lost in a
// crash only means the next start scans.
func WriteCleanStop(stateDir, ledgerPath string) error {
	mark, err := ledgerMark(ledgerPath)
	if err != nil {
		return err
	}
	p := filepath.Join(stateDir, CleanStopFile)
	if err := os.WriteFile(p+".new", []byte(mark), 0o600); err != nil {
		return err
	}
	return os.Rename(p+".new", p)
}

// StoppedCleanly says whether the ledger ends where the clean-stop marker
// says, and removes the marker (this run is not stopped yet).
func StoppedCleanly(stateDir, ledgerPath string) bool {
	p := filepath.Join(stateDir, CleanStopFile)
	want, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	os.Remove(p)
	got, err := ledgerMark(ledgerPath)
	return err == nil && got == string(want)
}

// PendingWrite is an allowed write decision without a result record.
type PendingWrite struct {
	CallID string
	Temps  []string // candidate temp paths beneath base: one per resolved root
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

// ScanChunk is how much the backward scan reads at a time (tests make it
// small, so records straddle reads).
var ScanChunk = 1 << 20

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
	chunk := int64(ScanChunk)
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

// TempName is the temporary name an operation gives a call's file beside
// its target while it commits.
type TempName func(callID string) string

// PendingWrites scans the ledger from the last start record to its end
// for allowed decisions of the operations in temps (those that commit
// through a temporary name, with the name each gives) with no result
// record. A decision's targets are read as its operation recorded them
// (authz.Op.ResolvedFromRecord), one target or several.
func PendingWrites(ledgerPath string, temps map[api.Operation]TempName) ([]PendingWrite, error) {
	var opFields [][]byte
	for op := range temps {
		opFields = append(opFields, []byte(`"operation":`+strconv.Quote(string(op))))
	}
	// Only the writes still pending are kept: memory is bounded by the
	// writes in flight at the crash, not by the run's.
	pending := map[string]*PendingWrite{}
	err := scanSinceStart(ledgerPath, func(line []byte) {
		isDecision := bytes.Contains(line, kindDecision) && containsAny(line, opFields)
		isResult := !isDecision && len(pending) > 0 && bytes.Contains(line, kindResult)
		if id, ok := resultCallID(line); isResult && ok {
			delete(pending, id) // the common case, without a decode
			return
		}
		if !isDecision && !isResult {
			return
		}
		var r scanRec
		if json.Unmarshal(line, &r) != nil || r.CallID == "" {
			return
		}
		op := api.Operation(r.Operation)
		tempName, o := temps[op], authz.LookupOp(op)
		switch {
		case r.Kind == audit.KindDecision && tempName != nil && o != nil && r.Verdict == "allow":
			pw := &PendingWrite{CallID: r.CallID}
			for _, target := range o.ResolvedFromRecord(r.Resolved) {
				for _, res := range target {
					if res.Outcome == authz.OutcomeOK && res.RootPath != "" && res.Rel != "" {
						pw.Temps = append(pw.Temps, path.Join(res.RootPath, path.Dir(res.Rel), tempName(r.CallID)))
					}
				}
			}
			pending[r.CallID] = pw
		case r.Kind == audit.KindResult:
			delete(pending, r.CallID)
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]PendingWrite, 0, len(pending))
	for _, pw := range pending {
		out = append(out, *pw)
	}
	// Call ids are ULIDs: in the order the calls came.
	slices.SortFunc(out, func(a, b PendingWrite) int { return strings.Compare(a.CallID, b.CallID) })
	return out, nil
}

// scanSinceStart hands fn each whole record line of the ledger from the
// last start record to its end (see PendingWrites).
func scanSinceStart(ledgerPath string, fn func(line []byte)) error {
	f, err := os.Open(ledgerPath)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	from, err := lastStartOffset(f, fi.Size())
	if err != nil {
		return err
	}
	br := bufio.NewReaderSize(io.NewSectionReader(f, from, fi.Size()-from), 1<<20)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A record longer than the buffer: read it whole.
			rest, err2 := br.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		if len(line) > 0 {
			fn(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
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

// RemoveTemp removes one temp path beneath base (openat2 resolution of
// its parent, then fileop.RemoveTemp on the parent's fd: only a regular
// file with the temp prefix). A name that is not there is not an error.
func RemoveTemp(base *securefs.Root, p string) (bool, error) {
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

func containsAny(line []byte, pats [][]byte) bool {
	for _, p := range pats {
		if bytes.Contains(line, p) {
			return true
		}
	}
	return false
}

// ChangesetTempName is the temporary name the i-th change of call id's
// changeset commits through, beside its file (daemon/exec_changeset.go):
// a crash's leftover is found from the changeset record alone.
func ChangesetTempName(callID string, i int) string {
	return fileop.TempPrefix + callID + "." + strconv.Itoa(i)
}

// PendingChangeset is an allowed changeset record (its commit began)
// without a result record after it: a crash came mid-commit.
type PendingChangeset struct {
	CallID  string
	Changes []api.Change
}

var kindChangeset = []byte(`"kind":"changeset"`)

// PendingChangesets scans the ledger from the last start record to its
// end for allowed changeset records with no result record for their call.
func PendingChangesets(ledgerPath string) ([]PendingChangeset, error) {
	pending := map[string]*PendingChangeset{}
	err := scanSinceStart(ledgerPath, func(line []byte) {
		isCS := bytes.Contains(line, kindChangeset)
		if !isCS && (len(pending) == 0 || !bytes.Contains(line, kindResult)) {
			return
		}
		var r struct {
			CallID  string       `json:"call_id"`
			Kind    string       `json:"kind"`
			Verdict string       `json:"verdict"`
			Changes []api.Change `json:"changes"`
		}
		if json.Unmarshal(line, &r) != nil || r.CallID == "" {
			return
		}
		switch {
		case r.Kind == audit.KindChangeset && r.Verdict == string(api.VerdictAllow):
			pending[r.CallID] = &PendingChangeset{CallID: r.CallID, Changes: r.Changes}
		case r.Kind == audit.KindResult:
			delete(pending, r.CallID)
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]PendingChangeset, 0, len(pending))
	for _, pc := range pending {
		out = append(out, *pc)
	}
	slices.SortFunc(out, func(a, b PendingChangeset) int { return strings.Compare(a.CallID, b.CallID) })
	return out, nil
}
