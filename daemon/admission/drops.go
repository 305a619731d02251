//go:build linux

package admission

import (
	"fmt"
	"math"
	"sync"
	"time"
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
	// UnmappedRate and UnmappedBurst: a token bucket per uid, in records
	// per second. A person trying the socket by hand never reaches it.
	UnmappedRate  = 10
	UnmappedBurst = 20
	// DropWindow is how long after the first record it drops a uid's
	// summary is written: at most one summary per uid per window.
	DropWindow = time.Second
	// maxLimitedUIDs bounds the limiter's own memory. When full, uids
	// whose bucket is full again and that have nothing to summarize are
	// forgotten; if none is, further uids share one bucket (overflowUID).
	maxLimitedUIDs = 1024
	overflowUID    = math.MaxUint32 // (uid_t)-1, never a real uid
)

// DropLimiter is the per-uid token bucket, with the summaries it owes.
type DropLimiter struct {
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

func NewDropLimiter(summarize func(uid, gid uint32, n int)) *DropLimiter {
	return &DropLimiter{now: time.Now, buckets: map[uint32]*uidBucket{}, summarize: summarize}
}

// Allow reports whether a decision record of peer uid (mapped to no
// principal) may be written now; when not, it counts the record and makes
// sure a summary follows within DropWindow.
func (l *DropLimiter) Allow(uid, gid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucket(uid, gid, now)
	b.tokens = math.Min(UnmappedBurst, b.tokens+now.Sub(b.last).Seconds()*UnmappedRate)
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
		b.timer = time.AfterFunc(DropWindow, func() { l.flush(key) })
	}
	return false
}

// bucket returns uid's bucket, made full on first use; l.mu held.
func (l *DropLimiter) bucket(uid, gid uint32, now time.Time) *uidBucket {
	if b := l.buckets[uid]; b != nil {
		return b
	}
	if len(l.buckets) >= maxLimitedUIDs {
		refill := time.Duration(float64(time.Second) * UnmappedBurst / UnmappedRate)
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
	b := &uidBucket{tokens: UnmappedBurst, last: now, gid: gid}
	l.buckets[uid] = b
	return b
}

// flush writes the summary uid owes, if any.
func (l *DropLimiter) flush(uid uint32) {
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

// Close writes every summary still owed, now, and stops the timers: it
// runs before the ledger closes.
func (l *DropLimiter) Close() {
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

// DroppedDetail is the detail of the summary record of n decision records
// not written for uid.
func DroppedDetail(uid uint32, n int) string {
	if uid == overflowUID {
		return fmt.Sprintf("%d decision records not written: uids mapped to no principal, over %d records/s (burst %d), more uids than the limiter tracks (%d)",
			n, UnmappedRate, UnmappedBurst, maxLimitedUIDs)
	}
	return fmt.Sprintf("%d decision records not written: uid %d maps to no principal and went over %d records/s (burst %d)",
		n, uid, UnmappedRate, UnmappedBurst)
}
