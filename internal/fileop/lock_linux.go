package fileop

import "sync"

// Locks serializes the daemon's writers and deleters of one name, so that
// a precondition checked at commit time cannot go stale before the commit
// because of another call: of N writers with the same if_match, exactly
// one wins. The key is the parent directory's inode (device and inode
// number) and the name, so two paths that reach the same directory, by
// different roots or symlinks, share a lock. The zero value is ready.
type Locks struct {
	mu sync.Mutex
	m  map[lockKey]*lockEntry
}

type lockKey struct {
	dev, ino uint64
	name     string
}

type lockEntry struct {
	mu   sync.Mutex
	refs int // holders and waiters; the entry goes when it drops to 0
}

// Lock blocks until the caller holds p's name, and returns the function
// that releases it (idempotent). Hold it from before Write or Delete until
// after it returns.
func (l *Locks) Lock(p *Parent) (unlock func()) {
	k := lockKey{dev: p.dir.Stat.Dev, ino: p.dir.Stat.Ino, name: p.Name}
	l.mu.Lock()
	if l.m == nil {
		l.m = map[lockKey]*lockEntry{}
	}
	e := l.m[k]
	if e == nil {
		e = &lockEntry{}
		l.m[k] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Unlock()
			l.mu.Lock()
			if e.refs--; e.refs == 0 {
				delete(l.m, k)
			}
			l.mu.Unlock()
		})
	}
}
