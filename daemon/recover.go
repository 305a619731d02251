//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/daemon/recovery"
	"github.com/sluicehq/sluice/internal/fileop"
	"github.com/sluicehq/sluice/internal/securefs"
)

// Recovery of interrupted writes (docs/design.md §3, "Writes and a
// crash"): the ledger scan is package recovery; the daemon removes what
// it finds and records each removal.

// legacyJournal is the temp journal of sluiced before the call-id temp
// names; a start sweeps what it lists once, then removes it.
const legacyJournal = "write-temps.jsonl"

// recoverWrites removes the temp files of the writes a crash interrupted
// (see above) and appends a recovered record for each one it removed;
// the start record that follows syncs them. It runs after the ledger is
// open and before the start's policy_loaded record.
func (d *Daemon) recoverWrites(base *securefs.Root, ledgerPath string) error {
	d.sweepLegacyJournal(base)
	if recovery.StoppedCleanly(d.cfg.StateDir, ledgerPath) {
		return nil
	}
	pws, err := recovery.PendingWrites(ledgerPath, tempNames())
	if err != nil {
		return fmt.Errorf("scan the audit ledger for interrupted writes: %w", err)
	}
	if err := d.recoverChangesets(base, ledgerPath); err != nil {
		return err
	}
	for _, pw := range pws {
		for _, tp := range pw.Temps {
			removed, err := recovery.RemoveTemp(base, tp)
			if err != nil {
				d.log.Warn("could not remove the temp file of an interrupted write", "call_id", pw.CallID, "path", tp, "err", err)
				continue
			}
			if !removed {
				continue
			}
			d.log.Warn("removed the temp file of an interrupted write", "call_id", pw.CallID, "path", tp)
			if _, err := d.ledger.Append(&audit.Record{Kind: audit.KindRecovered, CallID: pw.CallID,
				Detail: "removed the temp file of an interrupted write: " + tp}); err != nil {
				return fmt.Errorf("audit recovered: %w", err)
			}
		}
	}
	return nil
}

// recoverChangesets reports each changeset a crash interrupted mid-commit
// (docs/design.md §4, "Commands that write"): which of its changes are on
// the host (committed) and which are not, each looked at beneath base
// through fds, in one recovered record per changeset; and it removes the
// temp files its commits left.
func (d *Daemon) recoverChangesets(base *securefs.Root, ledgerPath string) error {
	pcs, err := recovery.PendingChangesets(ledgerPath)
	if err != nil {
		return fmt.Errorf("scan the audit ledger for interrupted changesets: %w", err)
	}
	for _, pc := range pcs {
		done := 0
		for i := range pc.Changes {
			ch := &pc.Changes[i]
			tp := path.Join(path.Dir(ch.Path), recovery.ChangesetTempName(pc.CallID, i))
			if removed, err := recovery.RemoveTemp(base, tp); err != nil {
				d.log.Warn("could not remove the temp file of an interrupted changeset", "call_id", pc.CallID, "path", tp, "err", err)
			} else if removed {
				d.log.Warn("removed the temp file of an interrupted changeset", "call_id", pc.CallID, "path", tp)
			}
			ch.Committed = changeOnHost(base, ch)
			if ch.Committed {
				done++
			}
		}
		detail := fmt.Sprintf("a changeset interrupted by a crash: %d of %d changes are on the host (committed), the rest are not", done, len(pc.Changes))
		d.log.Warn("found a changeset a crash interrupted", "call_id", pc.CallID, "committed", done, "changes", len(pc.Changes))
		if _, err := d.ledger.Append(&audit.Record{Kind: audit.KindRecovered, CallID: pc.CallID,
			Changes: pc.Changes, Detail: detail}); err != nil {
			return fmt.Errorf("audit recovered: %w", err)
		}
	}
	return nil
}

// changeOnHost says whether a change of a changeset is what the host has
// now: a created or modified file with the new digest, a deleted name
// gone, a made directory there.
func changeOnHost(base *securefs.Root, ch *api.Change) bool {
	pp, err := fileop.ResolveParent(base, ch.Path)
	if err != nil {
		return ch.Action == "delete" && errors.Is(err, securefs.ErrNotExist)
	}
	defer pp.Close()
	cur, err := pp.Stat()
	if err != nil {
		return false
	}
	switch ch.Action {
	case "create", "modify":
		if cur.Kind != securefs.KindFile {
			return false
		}
		sum, err := cur.SHA256()
		return err == nil && sum == ch.SHA256
	case "delete":
		return !cur.Exists()
	case "mkdir":
		return cur.Kind == securefs.KindDir
	}
	return false
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
			if removed, _ := recovery.RemoveTemp(base, tp); removed {
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

// tempNames are the operations whose commit leaves a temp file beside its
// target (opSpec.tempName), for the recovery scan.
func tempNames() map[api.Operation]recovery.TempName {
	out := map[api.Operation]recovery.TempName{}
	for name, o := range operations {
		if o.tempName != nil {
			out[name] = o.tempName
		}
	}
	return out
}
