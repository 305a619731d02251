package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
)

// defaultLedger is the ledger of a sluiced with the default --state-dir.
const defaultLedger = "/var/lib/sluice/audit.jsonl"

// ledgerPath is FILE when an audit command is given none: $SLUICE_AUDIT,
// else defaultLedger.
func ledgerPath() string {
	if p := os.Getenv("SLUICE_AUDIT"); p != "" {
		return p
	}
	return defaultLedger
}

const auditVerifyHelp = `Usage: sluice audit verify [--anchor FILE] [--head SEQ:HASH]... [--accept-truncated] [FILE]

Without FILE: $SLUICE_AUDIT when set, else ` + defaultLedger + `.

Checks the hash chain of the ledger FILE and that it reaches its anchor
(STATE_DIR/audit.anchor beside it unless --anchor FILE) and every --head
(the record at SEQ exists with HASH; take heads from the journal's
"audit head" lines or from a copy kept elsewhere).

When the ledger is behind, a note says whether the write-ahead ring
beside it (audit.wal) holds the records that continue it: after a power
cut, sluiced appends them on its next start.

Exit 0: intact. Exit 1: the chain is broken, the ledger is behind its
anchor or a --head, or it holds a truncated record (records were cut while
sluiced was stopped; --accept-truncated exits 0 for truncations already
looked into, but still lists them).
`

// auditVerify checks a ledger. A truncation fails verify by default: the
// chain explains the gap, but records were lost, and a reviewer's cron job
// running verify must notice that without reading the output.
func (e *env) auditVerify(args []string) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	anchorPath := fs.String("anchor", "", "")
	acceptTrunc := fs.Bool("accept-truncated", false, "")
	var heads []audit.Anchor
	fs.Func("head", "", func(s string) error {
		h, err := audit.ParseHead(s)
		if err != nil {
			return err
		}
		heads = append(heads, h)
		return nil
	})
	f, path, code := e.openLedgerHelp(fs, args, auditVerifyHelp)
	if f == nil {
		return code
	}
	defer f.Close()
	anchorNote := ""
	ap := *anchorPath
	if ap == "" {
		ap = audit.AnchorPath(path)
	}
	a, aerr := audit.ReadAnchor(ap)
	switch {
	case aerr == nil && a.Seq > 0:
		heads = append(heads, a)
	case aerr == nil || (errors.Is(aerr, os.ErrNotExist) && *anchorPath == ""):
		anchorNote = fmt.Sprintf("note: no anchor at %s: cannot tell whether the newest records were cut (pass --head SEQ:HASH)\n", ap)
	case errors.Is(aerr, audit.ErrAnchorDamaged):
		fmt.Fprintf(e.stdout, "ANCHOR DAMAGED %s: %v\n", ap, aerr)
		return ExitFailed
	default:
		fmt.Fprintf(e.stderr, "sluice audit verify: %v\n", aerr)
		return ExitUsage
	}
	rep, err := audit.Check(f, heads)
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		fmt.Fprintf(e.stdout, "BROKEN at seq %d (line %d): %s\n%d records before it are intact\n", ve.Seq, ve.Line, ve.Msg, rep.Records)
		return ExitFailed
	case err != nil:
		fmt.Fprintf(e.stderr, "sluice audit verify: %v\n", err)
		return ExitUsage
	}
	fmt.Fprint(e.stdout, anchorNote)
	failed := false
	if len(rep.Behind) > 0 {
		e.ringNote(path, rep, heads)
	}
	for _, b := range rep.Behind {
		what := "--head"
		if aerr == nil && strings.HasPrefix(b, fmt.Sprintf("head %d:%s:", a.Seq, a.Hash)) {
			what = "anchor " + ap
		}
		fmt.Fprintf(e.stdout, "BEHIND %s: %s\n", what, b)
		failed = true
	}
	for _, t := range rep.Truncations {
		fmt.Fprintf(e.stdout, "TRUNCATED at seq %d (%s): %s\n", t.Seq, safeLine(t.Time), safeLine(t.Detail))
		failed = failed || !*acceptTrunc
	}
	if failed {
		fmt.Fprintf(e.stdout, "FAILED: %d records, hash chain intact, but records were lost (see above)\n", rep.Records)
		return ExitFailed
	}
	fmt.Fprintf(e.stdout, "ok: %d records, hash chain intact, head %d:%s\n", rep.Records, rep.LastSeq, rep.LastHash)
	return ExitOK
}

// ringNote says when the write-ahead ring beside a ledger that is behind
// holds records that continue it (those the next start of sluiced appends,
// by the same rules): after a power cut the ledger's disk copy can end
// before its durable head until sluiced starts; with no power cut, the
// file was cut. It says whether they reach each head the ledger is
// behind: a power cut never leaves the ring short of the anchor.
func (e *env) ringNote(path string, rep *audit.Report, heads []audit.Anchor) {
	recs, err := audit.RingTail(path, rep.LastSeq, rep.LastHash)
	if err != nil || len(recs) == 0 {
		return
	}
	last := recs[len(recs)-1]
	reach := "they reach every head given"
	for _, h := range heads {
		found := false
		for _, r := range recs {
			if r.Seq == h.Seq && r.Hash == h.Hash {
				found = true
			}
		}
		if h.Seq > rep.LastSeq && !found {
			reach = fmt.Sprintf("they do NOT reach head %d:%s, so records were cut from the ledger file whatever else happened", h.Seq, h.Hash)
			break
		}
	}
	fmt.Fprintf(e.stdout, "note: the write-ahead ring %s holds %d records that continue this ledger (seq %d to %d, hash chain intact), "+
		"which the next start of sluiced appends; %s. After a power cut this is expected; otherwise records were cut from the ledger file.\n",
		audit.WALPath(path), len(recs), recs[0].Seq, last.Seq, reach)
}

const auditTailHelp = `Usage: sluice audit tail [-n N] [-f] [--denied] [--principal NAME] [--tool NAME] [FILE]

Print the last N records of the ledger FILE (default 20) as readable
lines; -f keeps following it. Without FILE: $SLUICE_AUDIT when set, else
` + defaultLedger + `.

Filters (all that are given must match):
  --denied          only denials: records whose verdict is deny
  --principal NAME  only records of this principal (its manifest name)
  --tool NAME       only records of this tool
`

func (e *env) auditTail(args []string) int {
	fs := flag.NewFlagSet("audit tail", flag.ContinueOnError)
	n := fs.Int("n", 20, "")
	follow := fs.Bool("f", false, "")
	denied := fs.Bool("denied", false, "")
	principal := fs.String("principal", "", "")
	tool := fs.String("tool", "", "")
	f, path, code := e.openLedgerHelp(fs, args, auditTailHelp)
	if f == nil {
		return code
	}
	defer f.Close()
	match := func(r *audit.Record) bool {
		return (!*denied || r.Verdict == api.VerdictDeny) &&
			(*principal == "" || r.Principal != nil && r.Principal.Name == *principal) &&
			(*tool == "" || r.Tool == *tool)
	}
	var last []string
	err := audit.Read(f, func(r *audit.Record) error {
		if !match(r) {
			return nil
		}
		last = append(last, audit.Summary(r))
		if len(last) > *n {
			last = last[1:]
		}
		return nil
	})
	// A record's args, resource and detail are the agent's: escaped.
	for _, l := range last {
		fmt.Fprintln(e.stdout, safeLine(l))
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice audit tail: stopped: %v (run 'sluice audit verify %s')\n", err, path)
		return ExitFailed
	}
	if !*follow {
		return ExitOK
	}
	// Follow: read whole new lines as they are appended. Records are shown
	// as written; 'audit verify' is what checks the chain.
	br := bufio.NewReader(f)
	var partial []byte
	for {
		line, err := br.ReadBytes('\n')
		partial = append(partial, line...)
		if err == io.EOF {
			select {
			case <-e.ctx.Done():
				return ExitOK
			case <-time.After(300 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "sluice audit tail: %v\n", err)
			return ExitFailed
		}
		var r audit.Record
		if jerr := audit.DecodeLine(partial, &r); jerr == nil {
			if match(&r) {
				fmt.Fprintln(e.stdout, safeLine(audit.Summary(&r)))
			}
		} else {
			fmt.Fprintf(e.stdout, "?? unreadable record: %s\n", safeLine(jerr.Error()))
		}
		partial = partial[:0]
	}
}

// openLedgerHelp parses an audit subcommand's flags and its FILE (the
// default ledger when none is given) and opens it. On failure it returns a
// nil file and the exit code.
func (e *env) openLedgerHelp(fs *flag.FlagSet, args []string, help string) (*os.File, string, int) {
	pos, code, ok := e.parse(fs, args, help)
	if !ok {
		return nil, "", code
	}
	path := ledgerPath()
	switch len(pos) {
	case 0:
	case 1:
		path = pos[0]
	default:
		fmt.Fprintf(e.stderr, "sluice %s: want at most one FILE\n\n%s", fs.Name(), help)
		return nil, "", ExitUsage
	}
	f, err := os.Open(path)
	if err != nil {
		hint := ""
		if len(pos) == 0 {
			hint = " (no FILE given: the default ledger; name one, or set $SLUICE_AUDIT)"
		}
		fmt.Fprintf(e.stderr, "sluice %s: %v%s\n", fs.Name(), err, hint)
		return nil, "", ExitUsage
	}
	return f, path, ExitOK
}
