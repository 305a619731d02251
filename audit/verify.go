package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// VerifyError names the first record that breaks the chain.
type VerifyError struct {
	Seq  uint64 // the seq the broken record should have had
	Line int    // 1-based line number
	Msg  string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("seq %d (line %d): %s", e.Seq, e.Line, e.Msg)
}

// Verify reads a whole ledger and checks every record's hash, that seq
// counts up from 1 and that each prev is the hash of the record before.
// It returns the number of intact records and, if the chain is broken, a
// *VerifyError naming the first bad seq.
func Verify(r io.Reader) (uint64, error) {
	var n uint64
	err := Read(r, func(*Record) error { n++; return nil })
	return n, err
}

// Report is what Check found in a ledger whose chain is intact.
type Report struct {
	Records  uint64 // records read
	LastSeq  uint64
	LastHash string
	// Truncations are the truncated records: each says records were cut
	// from the ledger while the daemon was stopped.
	Truncations []*Record
	// Behind lists the heads (the anchor's, --head's) the ledger does not
	// reach or contradicts, one message each.
	Behind []string
}

// Check verifies a whole ledger like Verify and checks that it contains
// each of heads: the record at head.Seq exists and has head.Hash. A chain
// error is returned as by Verify, with the report so far.
func Check(r io.Reader, heads []Anchor) (*Report, error) {
	rep := &Report{LastHash: Genesis}
	seen := make([]bool, len(heads))
	err := Read(r, func(rec *Record) error {
		rep.Records++
		rep.LastSeq, rep.LastHash = rec.Seq, rec.Hash
		if rec.Kind == KindTruncated {
			rep.Truncations = append(rep.Truncations, rec)
		}
		for i, h := range heads {
			if h.Seq == rec.Seq {
				seen[i] = true
				if h.Hash != rec.Hash {
					rep.Behind = append(rep.Behind, fmt.Sprintf("head %d:%s: the record at seq %d has hash %s: records were replaced", h.Seq, h.Hash, h.Seq, rec.Hash))
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	for i, h := range heads {
		switch {
		case seen[i]:
		case h.Seq > rep.LastSeq:
			rep.Behind = append(rep.Behind, fmt.Sprintf("head %d:%s: the ledger ends at seq %d: %d records were cut", h.Seq, h.Hash, rep.LastSeq, h.Seq-rep.LastSeq))
		default:
			rep.Behind = append(rep.Behind, fmt.Sprintf("head %d:%s: no record with seq %d: it was lost in a truncation", h.Seq, h.Hash, h.Seq))
		}
	}
	return rep, nil
}

var errLineTooLong = errors.New("line longer than the largest record")

func readLine(br *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		chunk, err := br.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > maxRecordBytes+1 {
			return out, errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return out, err
	}
}

// Read decodes every record of a ledger, checking the chain as it goes,
// and hands each to fn. It stops at the first bad record with a
// *VerifyError naming it.
//
// A truncated record may skip sequence numbers (the daemon found records
// cut and continued past its anchor, docs/audit.md): its prev still links to
// the last record left, so the chain is whole, and its seq tells how many
// were lost. Read accepts it; Check reports it.
func Read(r io.Reader, fn func(*Record) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	prev := Genesis
	var last uint64
	for line := 1; ; line++ {
		b, err := readLine(br)
		if err == io.EOF && len(b) == 0 {
			return nil
		}
		want := last + 1
		switch {
		case errors.Is(err, errLineTooLong):
			return &VerifyError{Seq: want, Line: line, Msg: err.Error()}
		case err == io.EOF: // bytes without a final newline
			return &VerifyError{Seq: want, Line: line, Msg: "torn last line (no newline): the daemon cuts it on its next start"}
		case err != nil:
			return fmt.Errorf("read: %w", err)
		}
		rec, cerr := checkLine(b)
		if cerr != nil {
			return &VerifyError{Seq: want, Line: line, Msg: cerr.Error()}
		}
		if rec.Seq > maxSeq {
			return &VerifyError{Seq: want, Line: line, Msg: fmt.Sprintf("seq %d is out of range (forged)", rec.Seq)}
		}
		if rec.Seq != want && !(rec.Kind == KindTruncated && rec.Seq > want) {
			return &VerifyError{Seq: want, Line: line, Msg: fmt.Sprintf("seq is %d, want %d (a record was removed or inserted)", rec.Seq, want)}
		}
		if rec.Prev != prev {
			return &VerifyError{Seq: want, Line: line, Msg: "prev does not match the hash of the record before (a record was removed, inserted or reordered)"}
		}
		prev = rec.Hash
		last = rec.Seq
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// Summary renders a record as one human-readable line.
func Summary(rec *Record) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%6d %s %-13s", rec.Seq, rec.Time, rec.Kind)
	if rec.Principal != nil {
		fmt.Fprintf(&b, " %s(uid=%d,pid=%d)", rec.Principal.Name, rec.Principal.UID, rec.Principal.PID)
	}
	if rec.Tool != "" {
		fmt.Fprintf(&b, " %s", rec.Tool)
	}
	if len(rec.Args) > 0 && len(rec.Args) < 200 {
		var compact bytes.Buffer
		if json.Compact(&compact, rec.Args) == nil {
			fmt.Fprintf(&b, " %s", compact.String())
		}
	}
	if rec.Verdict != "" {
		fmt.Fprintf(&b, " -> %s", rec.Verdict)
	}
	if rec.Reason != "" {
		fmt.Fprintf(&b, " %s", rec.Reason)
	}
	if rec.Resource != "" {
		fmt.Fprintf(&b, " %s", rec.Resource)
	}
	if r := rec.Result; r != nil {
		fmt.Fprintf(&b, " ok=%t bytes=%d truncated=%t %.2fms", r.OK, r.Bytes, r.Truncated, r.DurationMS)
		if r.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d", *r.ExitCode)
		}
	}
	if rec.PolicyVersion != "" && rec.Kind == KindPolicyLoaded {
		fmt.Fprintf(&b, " %s", rec.PolicyVersion)
	}
	if rec.Detail != "" {
		fmt.Fprintf(&b, " (%s)", rec.Detail)
	}
	if rec.CallID != "" {
		fmt.Fprintf(&b, " [%s]", rec.CallID)
	}
	return b.String()
}

// DecodeLine checks one line's own hash and decodes it into r (for
// following a ledger as it grows; the chain is Verify's business).
func DecodeLine(line []byte, r *Record) error {
	rec, err := checkLine(line)
	if err != nil {
		return err
	}
	*r = *rec
	return nil
}
