package fileop

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
)

// WriteMode says whether a write may create the name, replace it, or both.
// The zero value, Create, never destroys anything.
type WriteMode int

const (
	// Create: the name must not exist (else ErrExists).
	Create WriteMode = iota
	// Overwrite: the name must be an existing regular file (else
	// securefs.ErrNotExist, or a *KindError).
	Overwrite
	// CreateOrOverwrite: either.
	CreateOrOverwrite
)

var modeNames = [...]string{Create: "create", Overwrite: "overwrite", CreateOrOverwrite: "create_or_overwrite"}

func (m WriteMode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("WriteMode(%d)", int(m))
}

// ParseWriteMode maps the manifest's and the wire's names: "create",
// "overwrite", "create_or_overwrite".
func ParseWriteMode(s string) (WriteMode, error) {
	for m, n := range modeNames {
		if s == n {
			return WriteMode(m), nil
		}
	}
	return 0, fmt.Errorf("write mode %q: want create, overwrite or create_or_overwrite", s)
}

// WriteOptions are the decided parameters of one write.
type WriteOptions struct {
	Mode WriteMode
	// Perm is the permission bits of a new file (0 means 0644). Only the
	// 0777 bits are used: no write makes a setuid, setgid or sticky file.
	// A replaced file keeps its own owner and permission bits (those same
	// 0777 bits), as an editor's save does.
	Perm fs.FileMode
	// UID and GID own a new file (the daemon passes the root directory's
	// owner); -1 leaves that id as the daemon created it.
	UID, GID int
	// Check, if set, is the precondition: it runs on the name as it is at
	// commit time (after the content is written and fsynced, immediately
	// before the link or rename) and, if it returns an error, nothing is
	// committed and no temporary file remains; Write returns that error
	// wrapped. It may run more than once when the name changes under it.
	Check func(Current) error
	// TempName, if set, is the one temporary name the write may use (it
	// must start with TempPrefix): the daemon derives it from the call id,
	// which its durable decision record already names, so a crash's
	// leftover can be found without a journal of its own. The name is
	// tried once: if it exists, the write fails (EEXIST) and leaves it.
	// Empty: a random name, retried on a collision.
	TempName string
	// OnTemp, if set, is called with each temporary name before it is
	// created (an error aborts the write); OnTempDone once that name is
	// gone again (renamed over the target or removed) and the directory
	// fsynced. A name reported by OnTemp without OnTempDone may be left by
	// a crash: RemoveTemp sweeps it.
	OnTemp     func(dir *Parent, tmpName string) error
	OnTempDone func(dir *Parent, tmpName string)
	// MinFree is the space the write must leave on the parent's file
	// system (the zero value: the default reserve); a write that would
	// leave less is refused before a byte is written, with a
	// *NoSpaceError (ENOSPC).
	MinFree Reserve

	// DeferDirSync leaves the directory fsync after the commit to the
	// caller (Parent.SyncDir), which commits many names in one directory
	// and syncs it once: until then the new name may not survive a crash
	// (the file's content does). OnTempDone is not called.
	DeferDirSync bool

	noTmpfile bool // tests: take the named-temp path O_TMPFILE-less filesystems take
}

// WriteResult describes the committed content.
type WriteResult struct {
	SHA256  string // "sha256:<hex>" of the new content
	Bytes   int64
	Created bool // false: an existing file was replaced
}

// maxCommitAttempts bounds the retries when the name keeps changing
// between the stat and the commit (a concurrent creator or deleter).
const maxCommitAttempts = 8

// meta is the owner and permission bits a file is to carry.
type meta struct {
	uid, gid int
	perm     uint32
}

// Write commits content as p's final name, atomically: a reader, or a
// crash at any point, sees the old file or the new one, never a torn one.
//
// The content goes into an O_TMPFILE inode in the parent (a named temp
// file, O_CREAT|O_EXCL|O_NOFOLLOW, where the filesystem lacks O_TMPFILE),
// is chowned, chmoded and fsynced; then, with opts.Check passed on the
// name as it is now, it is linked to the name when the name is absent
// (linkat never replaces: EEXIST is ErrExists for Create) or linked to a
// random temporary name and renamed over it; last, the directory is
// fsynced. The final name is never followed. If it exists it must be a
// regular file: a symlink or directory there is a *KindError and is left
// as it is, and so is a symlink's target. A hard link to an outside file
// is replaced by the rename, never written through.
//
// A write that would leave the file system below opts.MinFree is refused
// before anything is created (*NoSpaceError, ENOSPC). ENOSPC or EDQUOT
// while writing leaves nothing behind: the temporary inode is removed and
// the name keeps its old content. Every error wraps the errno it came
// from, for errclass.
//
// An error after the commit (the last directory fsync, or dropping a
// temporary name) wraps ErrNotDurable and comes with a filled result: the
// new file is in place but might not survive a power loss.
func Write(p *Parent, content []byte, opts WriteOptions) (WriteResult, error) {
	defer runtime.KeepAlive(p)
	if err := checkTarget(p.Name); err != nil {
		return WriteResult{}, fmt.Errorf("write: %w", err)
	}
	if opts.Mode < Create || opts.Mode > CreateOrOverwrite {
		return WriteResult{}, fmt.Errorf("write %q: invalid mode %v", p.Name, opts.Mode)
	}
	perm := uint32(opts.Perm & 0o777)
	if opts.Perm == 0 {
		perm = 0o644
	}
	fresh := meta{uid: opts.UID, gid: opts.GID, perm: perm}

	// Refuse early what the commit would refuse anyway, before writing a
	// byte; the commit checks again.
	cur, err := p.Stat()
	if err != nil {
		return WriteResult{}, fmt.Errorf("write: %w", err)
	}
	if err := admit(opts.Mode, cur, p.Name); err != nil {
		return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
	}

	if err := checkSpace(p, int64(len(content)), opts.MinFree); err != nil {
		return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
	}

	t, err := openTemp(p, &opts)
	if err != nil {
		return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
	}
	committed := false
	defer func() {
		if !committed {
			t.abort()
		}
	}()
	if _, err := t.f.Write(content); err != nil {
		return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
	}
	if _, err := t.setMeta(metaFor(cur, fresh)); err != nil {
		return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
	}
	if err := t.f.Sync(); err != nil {
		return WriteResult{}, fmt.Errorf("write %q: fsync: %w", p.Name, err)
	}
	sum := sha256.Sum256(content)
	res := WriteResult{SHA256: "sha256:" + hex.EncodeToString(sum[:]), Bytes: int64(len(content))}

	for attempt := 0; ; attempt++ {
		if attempt == maxCommitAttempts {
			return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, ErrChanged)
		}
		if t.name != "" {
			if err := t.verify(); err != nil {
				return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
			}
		}
		cur, err := p.Stat()
		if err != nil {
			return WriteResult{}, fmt.Errorf("write: %w", err)
		}
		if err := admit(opts.Mode, cur, p.Name); err != nil {
			return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
		}
		if cur.Exists() && t.name == "" {
			// Replacing takes a name to rename from. Give the unnamed
			// file one, then look again: the check must see the target
			// as it is right before the rename.
			if err := t.link(); err != nil {
				return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
			}
			continue
		}
		changed, err := t.setMeta(metaFor(cur, fresh))
		if err == nil && changed {
			err = t.f.Sync()
		}
		if err != nil {
			return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
		}
		if opts.Check != nil {
			if err := opts.Check(cur); err != nil {
				return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, err)
			}
		}
		if !cur.Exists() {
			err := t.linkAs(p.Name)
			if err == unix.EEXIST {
				if opts.Mode == Create {
					return WriteResult{}, fmt.Errorf("write %q: %w", p.Name, ErrExists)
				}
				continue // created under us: replace it, if the check still passes
			}
			if err != nil {
				return WriteResult{}, fmt.Errorf("write %q: link: %w", p.Name, err)
			}
			res.Created = true
		} else {
			if err := unix.Renameat2(p.fd(), t.name, p.fd(), p.Name, 0); err != nil {
				return WriteResult{}, fmt.Errorf("write %q: rename: %w", p.Name, err)
			}
			t.renamed = true
		}
		break
	}
	committed = true
	if err := t.finish(); err != nil {
		return res, fmt.Errorf("write %q: %w: %w", p.Name, ErrNotDurable, err)
	}
	return res, nil
}

// admit says whether mode may commit over cur.
func admit(mode WriteMode, cur Current, name string) error {
	switch {
	case cur.Exists() && mode == Create:
		return ErrExists
	case !cur.Exists() && mode == Overwrite:
		return gone("%w (overwrite of a missing file)", securefs.ErrNotExist)
	case cur.Exists() && cur.Kind != securefs.KindFile:
		return &KindError{Name: name, Kind: cur.Kind}
	}
	return nil
}

// metaFor is what the new inode should carry: a replaced file's owner and
// permission bits, or the options' for a new one.
func metaFor(cur Current, fresh meta) meta {
	if cur.Kind == securefs.KindFile {
		return meta{uid: int(cur.UID), gid: int(cur.GID), perm: cur.Mode & 0o777}
	}
	return fresh
}

// temp is the new content's inode until it is committed.
type temp struct {
	p        *Parent
	opts     *WriteOptions
	f        *os.File
	dev, ino uint64
	cur      meta   // what the inode carries now
	name     string // its temporary name, once it has one
	renamed  bool   // the name was renamed over the target
}

// maxNameAttempts bounds retries on a colliding random name.
const maxNameAttempts = 16

// names is how many temporary names to try: opts.TempName once, or up to
// maxNameAttempts random ones.
func (t *temp) names() int {
	if t.opts.TempName != "" {
		return 1
	}
	return maxNameAttempts
}

// newName is the next temporary name to try.
func (t *temp) newName() (string, error) {
	if n := t.opts.TempName; n != "" {
		if !strings.HasPrefix(n, TempPrefix) || checkName(n) != nil {
			return "", fmt.Errorf("temp name %q: %w", n, ErrBadName)
		}
		return n, nil
	}
	return tempName(), nil
}

func tempName() string {
	var b [12]byte
	rand.Read(b[:])
	return TempPrefix + hex.EncodeToString(b[:])
}

func openTemp(p *Parent, opts *WriteOptions) (*temp, error) {
	t := &temp{p: p, opts: opts}
	if !opts.noTmpfile {
		fd, err := unix.Openat(p.fd(), ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		switch err {
		case nil:
			t.f = os.NewFile(uintptr(fd), "tmpfile")
			return t, t.init()
		case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
			// The filesystem (or an old kernel) has no O_TMPFILE.
		default:
			return nil, fmt.Errorf("open O_TMPFILE: %w", err)
		}
	}
	for range t.names() {
		name, err := t.newName()
		if err != nil {
			return nil, err
		}
		if err := t.announce(name); err != nil {
			return nil, err
		}
		fd, err := unix.Openat(p.fd(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			t.name = name
			t.f = os.NewFile(uintptr(fd), name)
			if err := t.init(); err != nil {
				t.abort()
				return nil, err
			}
			return t, nil
		}
		t.done(name)
		if err != unix.EEXIST {
			return nil, fmt.Errorf("create temp: %w", err)
		}
	}
	return nil, fmt.Errorf("create temp: %w", unix.EEXIST)
}

func (t *temp) init() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(t.f.Fd()), &st); err != nil {
		t.f.Close()
		return fmt.Errorf("fstat temp: %w", err)
	}
	t.dev, t.ino = st.Dev, st.Ino
	t.cur = meta{uid: int(st.Uid), gid: int(st.Gid), perm: st.Mode & 0o7777}
	return nil
}

func (t *temp) announce(name string) error {
	if t.opts.OnTemp != nil {
		if err := t.opts.OnTemp(t.p, name); err != nil {
			return fmt.Errorf("journal temp: %w", err)
		}
	}
	return nil
}

func (t *temp) done(name string) {
	if t.opts.OnTempDone != nil {
		t.opts.OnTempDone(t.p, name)
	}
}

// setMeta chowns then chmods (chown can clear mode bits), reporting
// whether anything changed; a later fsync makes it durable.
func (t *temp) setMeta(m meta) (bool, error) {
	changed := false
	uid, gid := -1, -1
	if m.uid >= 0 && m.uid != t.cur.uid {
		uid = m.uid
	}
	if m.gid >= 0 && m.gid != t.cur.gid {
		gid = m.gid
	}
	if uid >= 0 || gid >= 0 {
		if err := unix.Fchown(int(t.f.Fd()), uid, gid); err != nil {
			return false, fmt.Errorf("fchown temp: %w", err)
		}
		if uid >= 0 {
			t.cur.uid = uid
		}
		if gid >= 0 {
			t.cur.gid = gid
		}
		t.cur.perm = ^uint32(0) // chown may have cleared bits: chmod again
		changed = true
	}
	if m.perm != t.cur.perm {
		if err := unix.Fchmod(int(t.f.Fd()), m.perm); err != nil {
			return false, fmt.Errorf("fchmod temp: %w", err)
		}
		t.cur.perm = m.perm
		changed = true
	}
	return changed, nil
}

// link gives the unnamed O_TMPFILE inode its temporary name.
func (t *temp) link() error {
	defer runtime.KeepAlive(t.f)
	for range t.names() {
		name, err := t.newName()
		if err != nil {
			return err
		}
		if err := t.announce(name); err != nil {
			return err
		}
		err = unix.Linkat(unix.AT_FDCWD, procFd(int(t.f.Fd())), t.p.fd(), name, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			t.name = name
			return nil
		}
		t.done(name)
		if err != unix.EEXIST {
			return fmt.Errorf("link temp: %w", err)
		}
	}
	return fmt.Errorf("link temp: %w", unix.EEXIST)
}

// linkAs links the inode as name, which must not exist (linkat never
// replaces, and never follows name if it is a symlink).
func (t *temp) linkAs(name string) error {
	defer runtime.KeepAlive(t.f)
	if t.name != "" {
		return unix.Linkat(t.p.fd(), t.name, t.p.fd(), name, 0)
	}
	return unix.Linkat(unix.AT_FDCWD, procFd(int(t.f.Fd())), t.p.fd(), name, unix.AT_SYMLINK_FOLLOW)
}

// verify checks that the temporary name still names our inode: whatever
// replaced it is not committed.
func (t *temp) verify() error {
	var st unix.Stat_t
	if err := unix.Fstatat(t.p.fd(), t.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("temp %q: %w (%v)", t.name, ErrChanged, err)
	}
	if st.Dev != t.dev || st.Ino != t.ino {
		return fmt.Errorf("temp %q: %w", t.name, ErrChanged)
	}
	return nil
}

// finish, after a commit: drop the temporary name if it is still there,
// fsync the directory, report the name gone.
func (t *temp) finish() error {
	t.f.Close()
	var err error
	if t.name != "" && !t.renamed {
		if e := unix.Unlinkat(t.p.fd(), t.name, 0); e != nil && e != unix.ENOENT {
			err = fmt.Errorf("unlink temp: %w", e)
		}
	}
	if t.opts.DeferDirSync {
		return err
	}
	if e := t.p.syncDir(); e != nil && err == nil {
		err = e
	}
	if t.name != "" && err == nil {
		t.done(t.name)
	}
	return err
}

// abort, when nothing was committed: remove the temporary name, if any,
// durably; an unnamed O_TMPFILE inode vanishes with its fd.
func (t *temp) abort() {
	t.f.Close()
	if t.name == "" {
		return
	}
	if err := unix.Unlinkat(t.p.fd(), t.name, 0); err != nil && err != unix.ENOENT {
		return // left for the sweep: the journal still has it
	}
	if t.p.syncDir() == nil {
		t.done(t.name)
	}
}
