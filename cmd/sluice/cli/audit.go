package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluicehq/sluice/audit"
)

func (e *env) auditVerify(args []string) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	f, _, code := e.openLedger(fs, args)
	if f == nil {
		return code
	}
	defer f.Close()
	n, err := audit.Verify(f)
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		fmt.Fprintf(e.stdout, "BROKEN at seq %d (line %d): %s\n%d records before it are intact\n", ve.Seq, ve.Line, ve.Msg, n)
		return ExitFailed
	case err != nil:
		fmt.Fprintf(e.stderr, "sluice audit verify: %v\n", err)
		return ExitUsage
	}
	fmt.Fprintf(e.stdout, "ok: %d records, hash chain intact\n", n)
	return ExitOK
}

func (e *env) auditTail(args []string) int {
	fs := flag.NewFlagSet("audit tail", flag.ContinueOnError)
	n := fs.Int("n", 20, "")
	follow := fs.Bool("f", false, "")
	f, path, code := e.openLedger(fs, args)
	if f == nil {
		return code
	}
	defer f.Close()
	var last []string
	err := audit.Read(f, func(r *audit.Record) error {
		last = append(last, audit.Summary(r))
		if len(last) > *n {
			last = last[1:]
		}
		return nil
	})
	for _, l := range last {
		fmt.Fprintln(e.stdout, l)
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
			fmt.Fprintln(e.stdout, audit.Summary(&r))
		} else {
			fmt.Fprintf(e.stdout, "?? unreadable record: %v\n", jerr)
		}
		partial = partial[:0]
	}
}

// openLedger parses an audit subcommand's flags and its one FILE and opens
// it. On failure it returns a nil file and the exit code.
func (e *env) openLedger(fs *flag.FlagSet, args []string) (*os.File, string, int) {
	pos, code, ok := e.parse(fs, args, auditHelp)
	if !ok {
		return nil, "", code
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "sluice %s: want one FILE\n\n%s", fs.Name(), auditHelp)
		return nil, "", ExitUsage
	}
	f, err := os.Open(pos[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice %s: %v\n", fs.Name(), err)
		return nil, "", ExitUsage
	}
	return f, pos[0], ExitOK
}
