//go:build linux

package daemon

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
)

// Decision records of peers mapped to no principal are rate limited per
// uid: any local user may connect to the socket (it is 0660, but a
// manifest's principals need not cover the group), and before this each
// call appended, and synced, a decision record with up to 8 KiB of args,
// without limit: a ledger (and disk) filler. Over the limit the call is
// still denied principal_not_allowed (nothing runs, so nothing is lost but
// the record), and one "dropped" record per uid per window counts what was
// not written.
const (
	// unmappedRate and unmappedBurst: a token bucket per uid, in records
	// per second. A person trying the socket by hand never reaches it.
	unmappedRate  = 10
	unmappedBurst = 20
	// dropWindow is how long after the first record it drops a uid's
	// summary is written: at most one summary per uid per window.
	dropWindow = time.Second
	// maxLimitedUIDs bounds the limiter's own memory. When full, uids
	// whose bucket is full again and that have nothing to summarize are
	// forgotten; if none is, further uids share one bucket (overflowUID).
	maxLimitedUIDs = 1024
	overflowUID    = math.MaxUint32 // (uid_t)-1, never a real uid
)

// dropLimiter is the per-uid token bucket, with the summaries it owes.
type dropLimiter struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[uint32]*uidBucket
	closed  bool
	// flushing counts the summaries a timer is writing, so that close
	// waits for them before the ledger closes.
	flushing sync.WaitGroup
	// summarize writes one dropped record; called without mu held.
	summarize func(uid, gid uint32, n int)
}

type uidBucket struct {
	tokens  float64
	last    time.Time
	gid     uint32
	dropped int
	timer   *time.Timer // set while a summary is owed
}

func newDropLimiter(summarize func(uid, gid uint32, n int)) *dropLimiter {
	return &dropLimiter{now: time.Now, buckets: map[uint32]*uidBucket{}, summarize: summarize}
}

// allow reports whether a decision record of peer uid (mapped to no
// principal) may be written now; when not, it counts the record and makes
// sure a summary follows within dropWindow.
func (l *dropLimiter) allow(uid, gid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucket(uid, gid, now)
	b.tokens = math.Min(unmappedBurst, b.tokens+now.Sub(b.last).Seconds()*unmappedRate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	b.dropped++
	if b.timer == nil && !l.closed {
		key := uid
		if l.buckets[uid] != b {
			key = overflowUID
		}
		b.timer = time.AfterFunc(dropWindow, func() { l.flush(key) })
	}
	return false
}

// bucket returns uid's bucket, made full on first use; l.mu held.
func (l *dropLimiter) bucket(uid, gid uint32, now time.Time) *uidBucket {
	if b := l.buckets[uid]; b != nil {
		return b
	}
	if len(l.buckets) >= maxLimitedUIDs {
		refill := time.Duration(float64(time.Second) * unmappedBurst / unmappedRate)
		for k, b := range l.buckets {
			if b.dropped == 0 && b.timer == nil && now.Sub(b.last) >= refill {
				delete(l.buckets, k)
			}
		}
	}
	if len(l.buckets) >= maxLimitedUIDs {
		uid, gid = overflowUID, overflowUID
		if b := l.buckets[uid]; b != nil {
			return b
		}
	}
	b := &uidBucket{tokens: unmappedBurst, last: now, gid: gid}
	l.buckets[uid] = b
	return b
}

// flush writes the summary uid owes, if any.
func (l *dropLimiter) flush(uid uint32) {
	l.mu.Lock()
	b := l.buckets[uid]
	if b == nil || l.closed {
		l.mu.Unlock()
		return
	}
	n, gid := b.dropped, b.gid
	b.dropped, b.timer = 0, nil
	if n == 0 {
		l.mu.Unlock()
		return
	}
	l.flushing.Add(1) // under mu, before closed can be set: close waits for it
	l.mu.Unlock()
	defer l.flushing.Done()
	l.summarize(uid, gid, n)
}

// close writes every summary still owed, now, and stops the timers: it
// runs before the ledger closes.
func (l *dropLimiter) close() {
	type owed struct {
		uid, gid uint32
		n        int
	}
	var all []owed
	l.mu.Lock()
	l.closed = true
	for uid, b := range l.buckets {
		if b.timer != nil {
			b.timer.Stop()
			b.timer = nil
		}
		if b.dropped > 0 {
			all = append(all, owed{uid, b.gid, b.dropped})
			b.dropped = 0
		}
	}
	l.mu.Unlock()
	for _, o := range all {
		l.summarize(o.uid, o.gid, o.n)
	}
	l.flushing.Wait() // a timer's summary taken before closed was set
}

// keepDecisionRecord is the limiter's one question from auditDecision:
// false for a denied call of a peer mapped to no principal that is over
// its uid's rate. Every other decision is always recorded.
func (c *call) keepDecisionRecord() bool {
	if c.areq.Principal != "" || c.dec.Allowed() || c.dec.Pending() || c.d.drops == nil {
		return true
	}
	return c.d.drops.allow(c.peer.UID, c.peer.GID)
}

// auditDropped writes (and syncs) the summary of n decision records not
// written for uid.
func (d *Daemon) auditDropped(uid, gid uint32, n int) {
	detail := fmt.Sprintf("%d decision records not written: uid %d maps to no principal and went over %d records/s (burst %d)",
		n, uid, unmappedRate, unmappedBurst)
	if uid == overflowUID {
		detail = fmt.Sprintf("%d decision records not written: uids mapped to no principal, over %d records/s (burst %d), more uids than the limiter tracks (%d)",
			n, unmappedRate, unmappedBurst, maxLimitedUIDs)
	}
	err := d.ledger.AppendSync(&audit.Record{Kind: audit.KindDropped, Principal: &audit.Principal{UID: uid, GID: gid},
		Reason: api.ReasonPrincipalNotAllowed, Detail: detail})
	if err != nil {
		d.log.Error("audit dropped record failed", "err", err, "uid", uid, "count", n)
	}
}
