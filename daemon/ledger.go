//go:build linux

package daemon

import (
	"time"

	"github.com/sluicehq/sluice/audit"
)

// The daemon's ledger, which every group appends to: audit.Ledger with
// its appends and syncs timed into metrics.go's histograms.

// meteredLedger is the audit ledger with its appends and syncs timed.
type meteredLedger struct {
	*audit.Ledger
	m *metrics
}

func (l meteredLedger) Append(rec *audit.Record) (uint64, error) {
	if l.m == nil {
		return l.Ledger.Append(rec)
	}
	t := time.Now()
	seq, err := l.Ledger.Append(rec)
	l.m.auditAppend.Observe(time.Since(t).Seconds())
	return seq, err
}

func (l meteredLedger) Sync(seq uint64) error {
	if l.m == nil {
		return l.Ledger.Sync(seq)
	}
	t := time.Now()
	err := l.Ledger.Sync(seq)
	l.m.auditSync.Observe(time.Since(t).Seconds())
	return err
}

func (l meteredLedger) AppendSync(rec *audit.Record) error {
	seq, err := l.Append(rec)
	if err != nil {
		return err
	}
	return l.Sync(seq)
}
