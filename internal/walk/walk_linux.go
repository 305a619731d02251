//go:build linux

package walk

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/jsonenc"
)

// maxRetries bounds openat2's EAGAIN retries (a rename racing the lookup):
// a renaming loop must not spin the walk forever.
const maxRetries = 128

// dirBufSize is one getdents read.
const dirBufSize = 32 << 10

// noOpenat2 latches once the kernel has said ENOSYS.
var noOpenat2 atomic.Bool

// testHookOpen, when set (tests only), sees every fd the walk opens, so
// a test can check by readlink what was really opened. It may be called
// from several goroutines at once.
var testHookOpen func(fd int)

type kind uint8

const (
	kFile kind = iota
	kDir
	kSymlink
	kOther
)

var kindNames = [...]string{kFile: "file", kDir: "dir", kSymlink: "symlink", kOther: "other"}

func kindOfMode(mode uint32) kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return kFile
	case unix.S_IFDIR:
		return kDir
	case unix.S_IFLNK:
		return kSymlink
	}
	return kOther
}

// kindOfDT maps getdents' d_type; false for DT_UNKNOWN (the file system
// does not say: fstatat does).
func kindOfDT(t uint8) (kind, bool) {
	switch t {
	case unix.DT_REG:
		return kFile, true
	case unix.DT_DIR:
		return kDir, true
	case unix.DT_LNK:
		return kSymlink, true
	case unix.DT_UNKNOWN:
		return 0, false
	}
	return kOther, true
}

// dirRef is an open directory, shared by the walk and the file jobs in
// it; the last release closes it.
type dirRef struct {
	fd   int
	mnt  uint64 // mount key, for the openat fallback's mount check
	refs atomic.Int32
}

func (d *dirRef) acquire() { d.refs.Add(1) }

func (d *dirRef) release() {
	if d.refs.Add(-1) == 0 {
		unix.Close(d.fd)
	}
}

type dirent struct {
	name string
	dt   uint8
}

type walker struct {
	ctx      context.Context
	o        Options
	fallback bool
	buf      []byte // getdents, the walking goroutine's

	scanned, entries int
	maxDepth         int
	depthCuts        bool // a directory not entered at maxDepth is a cut
	needStat         bool // fstatat every entry (sizes)
	visit            func(d *dirRef, rel, name string, k kind, st *unix.Stat_t)
	procFD           int // /proc/self/fd (content search)

	// halt stops the walk; full says the output is capped (and halts).
	halt, full atomic.Bool

	// pending is what the walk counted and marked since it last handed
	// it on; the emitter (the walk itself, or content search's collector
	// with each file job, in walk order) adds it to total. So counts and
	// limits are those of the entries up to where the output was cut,
	// never of how far the walk had run ahead meanwhile: the result is
	// the same however the goroutines were scheduled, and so cannot
	// depend on what hidden entries cost to skip.
	pending tally
	// The emitter's: the output (whole parts, joined once at the end:
	// no copying as it grows), its size, records and total.
	parts   [][]byte
	cur     []byte // lines emitted one by one, not yet a part
	size    int64
	records int
	total   tally
}

// tally is counts and limits, added up in walk order.
type tally struct {
	s      Stats
	limits []string
}

func (t *tally) limit(l string) {
	if !slices.Contains(t.limits, l) {
		t.limits = append(t.limits, l)
	}
}

func (t *tally) add(o *tally) {
	a, b := &t.s, &o.s
	a.Dirs += b.Dirs
	a.Files += b.Files
	a.Symlinks += b.Symlinks
	a.Other += b.Other
	a.FilesRead += b.FilesRead
	a.Binary += b.Binary
	a.HardLinked += b.HardLinked
	a.Mounts += b.Mounts
	a.Changed += b.Changed
	a.Errors += b.Errors
	for _, l := range o.limits {
		t.limit(l)
	}
}

// countOpenErr files a failed open of a shown entry.
func (t *tally) countOpenErr(err error) {
	switch err {
	case unix.EXDEV:
		t.s.Mounts++
	case unix.ELOOP, unix.ENOTDIR, unix.ENOENT:
		t.s.Changed++
	default:
		t.s.Errors++
	}
}

func newWalker(ctx context.Context, o Options) *walker {
	return &walker{ctx: ctx, o: o, fallback: o.fallback || noOpenat2.Load(), buf: make([]byte, dirBufSize)}
}

// stop marks a limit that ends the walk (in pending: it takes effect in
// walk order).
func (w *walker) stop(limit string) {
	w.pending.limit(limit)
	w.halt.Store(true)
}

// take hands pending on.
func (w *walker) take() tally {
	t := w.pending
	w.pending = tally{}
	return t
}

// apply adds a tally to the result, unless the output is already cut:
// what comes after the cut is not part of the result.
func (w *walker) apply(t *tally) {
	if !w.full.Load() {
		w.total.add(t)
	}
}

// fits counts one record of n bytes (a whole line) if it fits both
// caps; else it marks the cap and ends the output and the walk. Only the
// emitter calls it.
func (w *walker) fits(n int) bool {
	if w.full.Load() {
		return false
	}
	limit := ""
	switch {
	case w.records >= w.o.MaxResults:
		limit = LimitResults
	case w.size+int64(n) > w.o.MaxBytes:
		limit = LimitBytes
	}
	if limit != "" {
		w.total.limit(limit)
		w.full.Store(true)
		w.halt.Store(true)
		return false
	}
	w.records++
	w.size += int64(n)
	return true
}

// emit appends one record if it fits.
func (w *walker) emit(line []byte) bool {
	if !w.fits(len(line)) {
		return false
	}
	w.cur = append(w.cur, line...)
	return true
}

// emitPart appends records already laid out in b (which the walker then
// owns and never changes).
func (w *walker) emitPart(b []byte) {
	if len(b) == 0 {
		return
	}
	if len(w.cur) > 0 {
		w.parts = append(w.parts, w.cur)
		w.cur = nil
	}
	w.parts = append(w.parts, b)
}

// output joins the parts.
func (w *walker) output() []byte {
	if len(w.parts) == 0 {
		return w.cur
	}
	out := make([]byte, 0, w.size)
	for _, p := range w.parts {
		out = append(out, p...)
	}
	return append(out, w.cur...)
}

// emitNow is emit for a walk that emits as it goes (names, trees): what
// the walk counted so far is applied first.
func (w *walker) emitNow(line []byte) bool {
	t := w.take()
	w.apply(&t)
	return w.emit(line)
}

// result finishes: what the walk counted after its last hand-on is
// applied (unless the output was cut before it).
func (w *walker) result() (*Result, error) {
	t := w.take()
	w.apply(&t)
	r := &Result{Out: w.output(), Records: w.records, Limits: w.total.limits, Truncated: len(w.total.limits) > 0, Stats: w.total.s}
	if slices.Contains(r.Limits, LimitCanceled) {
		return r, w.ctx.Err()
	}
	return r, nil
}

// start opens the caller's directory fd (O_PATH is fine) for reading:
// "." beneath it, the same directory.
func (w *walker) start(dir *os.File) (*dirRef, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	dfd := int(dir.Fd())
	var fd int
	var err error
	if !w.fallback {
		how := unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		for range maxRetries {
			if fd, err = unix.Openat2(dfd, ".", &how); err != unix.EAGAIN && err != unix.EINTR {
				break
			}
		}
		if err == unix.ENOSYS {
			noOpenat2.Store(true)
			w.fallback = true
		}
	}
	if w.fallback {
		fd, err = openatRetry(dfd, ".", flags)
	}
	runtime.KeepAlive(dir)
	if err != nil {
		return nil, &os.PathError{Op: "walk: open", Path: dir.Name(), Err: err}
	}
	d := &dirRef{fd: fd}
	d.refs.Store(1)
	if w.fallback {
		if d.mnt, err = mountKey(fd); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "walk: statx", Path: dir.Name(), Err: err}
		}
	}
	if testHookOpen != nil {
		testHookOpen(fd)
	}
	return d, nil
}

func openatRetry(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// openAt opens one name in parent, never following a symlink, never
// leaving parent, never onto another mount unless CrossMounts. With
// O_PATH a symlink there yields the link itself (the caller's fstat sees
// it); with O_DIRECTORY it fails ELOOP.
func (w *walker) openAt(parent *dirRef, name string, flags int) (int, error) {
	if name == "" || name == "." || name == ".." || strings.IndexByte(name, '/') >= 0 {
		return -1, unix.EINVAL // getdents never names these; fail closed
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !w.fallback {
		res := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS)
		if !w.o.CrossMounts {
			res |= unix.RESOLVE_NO_XDEV
		}
		how := unix.OpenHow{Flags: uint64(flags), Resolve: res}
		var fd int
		var err error
		for range maxRetries {
			if fd, err = unix.Openat2(parent.fd, name, &how); err != unix.EAGAIN && err != unix.EINTR {
				break
			}
		}
		if err != unix.ENOSYS {
			return fd, err
		}
		noOpenat2.Store(true)
		return -1, unix.ENOSYS // the walk started in openat2 mode: its dirs carry no mount keys
	}
	// One plain name with O_NOFOLLOW stays in parent by construction;
	// the mount is checked on what was opened.
	fd, err := openatRetry(parent.fd, name, flags)
	if err != nil || w.o.CrossMounts {
		return fd, err
	}
	mnt, err := mountKey(fd)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	if mnt != parent.mnt {
		unix.Close(fd)
		return -1, unix.EXDEV
	}
	return fd, nil
}

// mountKey names the mount fd is on: its mount id, or its device where
// statx gives no mount id (before Linux 5.8; a bind mount of the same
// file system is then not told apart).
func mountKey(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		return stx.Mnt_id, nil
	}
	return 1<<63 | uint64(stx.Dev_major)<<32 | uint64(stx.Dev_minor), nil
}

func (w *walker) openDir(parent *dirRef, name string) *dirRef {
	fd, err := w.openAt(parent, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		w.pending.countOpenErr(err)
		return nil
	}
	if testHookOpen != nil {
		testHookOpen(fd)
	}
	d := &dirRef{fd: fd}
	d.refs.Store(1)
	if w.fallback {
		if d.mnt, err = mountKey(fd); err != nil {
			unix.Close(fd)
			w.pending.s.Errors++
			return nil
		}
	}
	return d
}

// readDir reads a directory's names (not "." and ".."), sorted.
func (w *walker) readDir(fd int) []dirent {
	var ents []dirent
	for {
		n, err := unix.Getdents(fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.pending.s.Errors++
			break
		}
		if n <= 0 {
			break
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := w.buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				w.pending.s.Errors++
				break
			}
			dt, name := b[18], b[19:reclen]
			b = b[reclen:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if len(name) == 0 || string(name) == "." || string(name) == ".." {
				continue
			}
			w.scanned++
			if w.scanned > w.o.MaxScan {
				w.stop(LimitScan)
				return nil
			}
			ents = append(ents, dirent{name: string(name), dt: dt})
		}
	}
	slices.SortFunc(ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	return ents
}

// walkDir visits d's entries at depth (d's own entries are at depth 1
// below it), entering directories while depth < maxDepth.
func (w *walker) walkDir(d *dirRef, prefix string, depth int) {
	for _, e := range w.readDir(d.fd) {
		if w.halt.Load() {
			return
		}
		if w.ctx.Err() != nil {
			w.stop(LimitCanceled)
			return
		}
		var st unix.Stat_t
		var stp *unix.Stat_t
		k, known := kindOfDT(e.dt)
		if !known || w.needStat {
			if err := unix.Fstatat(d.fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				// Gone since getdents (or not statable): not shown, and
				// not counted, since it may have been a hidden name.
				continue
			}
			k, stp = kindOfMode(st.Mode), &st
		}
		rel := prefix + e.name
		if w.o.Skip(rel, e.name, k == kDir) {
			continue
		}
		w.entries++
		if w.entries > w.o.MaxEntries {
			w.stop(LimitEntries)
			return
		}
		switch k {
		case kFile:
			w.pending.s.Files++
		case kDir:
			w.pending.s.Dirs++
		case kSymlink:
			w.pending.s.Symlinks++
		default:
			w.pending.s.Other++
		}
		w.visit(d, rel, e.name, k, stp)
		if k != kDir || w.halt.Load() {
			continue
		}
		if depth >= w.maxDepth {
			if w.depthCuts {
				w.pending.limit(LimitDepth)
			}
			continue
		}
		if child := w.openDir(d, e.name); child != nil {
			w.walkDir(child, rel+"/", depth+1)
			child.release()
		}
	}
}

// Tree lists dir (an open directory fd, O_PATH or not, that the caller
// resolved beneath its root) to depth levels (1: its entries only), in
// Result.Out, one {"name","type"[,"size"]} line per shown entry, each
// directory's entries right after it. A depth beyond MaxDepth is listed
// to MaxDepth and marked truncated.
func Tree(ctx context.Context, dir *os.File, depth int, sizes bool, o Options) (*Result, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	if depth <= 0 {
		depth = 1
	}
	w := newWalker(ctx, o)
	w.maxDepth, w.depthCuts = min(depth, o.MaxDepth), depth > o.MaxDepth
	w.needStat = sizes
	root, err := w.start(dir)
	if err != nil {
		return nil, err
	}
	line := make([]byte, 0, 256)
	w.visit = func(d *dirRef, rel, name string, k kind, st *unix.Stat_t) {
		line = append(line[:0], `{"name":`...)
		line = jsonenc.AppendString(line, rel)
		line = append(line, `,"type":"`...)
		line = append(line, kindNames[k]...)
		line = append(line, '"')
		if sizes {
			var size int64
			if k == kFile && st != nil {
				size = st.Size
			}
			line = append(line, `,"size":`...)
			line = strconv.AppendInt(line, size, 10)
		}
		line = append(line, "}\n"...)
		w.emitNow(line)
	}
	w.walkDir(root, "", 1)
	root.release()
	return w.result()
}
