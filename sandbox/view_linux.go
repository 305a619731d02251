package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/fsview"
)

// ViewMount is one of a tool's mounts, as its view serves it: Source says
// what the kernel resolves beneath (see fsview.Source), Dest where it
// shows inside the container.
type ViewMount struct {
	Source fsview.Source
	Dest   string
	// Writable presents the mount as writable to everyone
	// (fsview.Options.Writable): set it for a directory mount that a
	// Spec's Scratch names, whose containers write into a scratch layer
	// over it. The view stays read-only.
	Writable bool
}

// View is a tool's read-only FUSE view of its mounts, made once per
// manifest load and bound into each of its containers. Every name a
// container looks up is decided by sluice's resolver at lookup time (see
// package fsview): never-listed names, sockets, FIFOs and devices do not
// exist in it, however and whenever the host made them.
type View struct {
	v      *fsview.View
	Mounts []Mount // for Spec.Mounts: O_PATH fds of the view's entries
	r      *Runner
}

// ViewTimeout is how long the kernel caches a view's names and
// attributes in a directory the view could not watch (the inotify watch
// limit): the longest a host edit of an allowed file takes to show there.
// Watched directories are cached for fsview.DefaultCacheTimeout and
// invalidated as the host changes them.
const ViewTimeout = time.Second

// NewView mounts a view of mounts in the runner's private rootfs area.
// hide(i, rel) says whether the entry at rel in mount i is hidden;
// maxOpen bounds the files one container holds open through it (0:
// fsview.DefaultMaxOpen); refuseLinks refuses to open a regular file with
// more than one link (fsview.Options.RefuseLinks). The view answers only root and the uids of the
// live containers made from a Spec that names it (Spec.View): Create
// admits a box's uid before its init runs, Destroy revokes it before the
// uid goes back to the range. The view owns the sources' roots from here
// on, also on error.
func (r *Runner) NewView(mounts []ViewMount, hide func(i int, rel string) bool, maxOpen int, refuseLinks bool) (*View, error) {
	srcs := make([]fsview.Source, len(mounts))
	rw := make([]bool, len(mounts))
	for i, m := range mounts {
		srcs[i] = m.Source
		rw[i] = m.Writable
	}
	dir := filepath.Join(r.rootfsDir(), fmt.Sprintf("v%s-%d", r.prefix[1:], r.seq.Add(1)))
	if err := os.Mkdir(dir, 0o700); err != nil {
		for _, s := range srcs {
			s.Root.Close()
		}
		return nil, err
	}
	fv, err := fsview.Mount(dir, srcs, fsview.Options{Hide: hide, Timeout: ViewTimeout, MaxOpen: maxOpen, RefuseLinks: refuseLinks, Writable: rw})
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	v := &View{v: fv, r: r}
	r.viewsMu.Lock()
	r.views = append(r.views, v)
	r.viewsMu.Unlock()
	for i, m := range mounts {
		fd, err := unix.Open(fv.Path(i), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			v.Close()
			return nil, fmt.Errorf("open view entry for %s: %w", m.Dest, err)
		}
		v.Mounts = append(v.Mounts, Mount{File: os.NewFile(uintptr(fd), m.Dest), Dest: m.Dest})
	}
	return v, nil
}

// admit lets uid (a container about to run) use the view; revoke ends it.
func (v *View) admit(uid uint32)  { v.v.Admit(uid) }
func (v *View) revoke(uid uint32) { v.v.Revoke(uid) }

// sync makes every host change finished so far visible through the view
// before a command starts (fsview.View.Sync): what an agent wrote a moment
// ago is what its tests read.
func (v *View) sync() { v.v.Sync() }

// Passthrough reports whether reads go straight to the backing files.
func (v *View) Passthrough() bool { return v.v.Passthrough }

// Close detaches the view. Containers made from it keep their binds until
// they are destroyed; the server then stops by itself.
func (v *View) Close() {
	for _, m := range v.Mounts {
		m.File.Close()
	}
	v.Mounts = nil
	v.v.Close()
	go func() {
		<-v.v.Done()
		os.Remove(v.v.Dir())
	}()
}

// waitViews waits, up to d, for every view's server to stop, and removes
// the view's directory; it reports the ones still serving, and what each
// still holds (fsview.Diag: whether it was closed at all, the uids still
// admitted, open files, the kernel's unanswered requests, the processes
// whose mount table holds it), for at most maxDiags of them.
func (r *Runner) waitViews(d time.Duration) (left int, diags []string) {
	r.viewsMu.Lock()
	views := r.views
	r.views = nil
	r.viewsMu.Unlock()
	deadline := time.After(d)
	late := false
	for _, v := range views {
		if !late {
			select {
			case <-v.v.Done():
				os.Remove(v.v.Dir())
				continue
			case <-deadline:
				late = true
			}
		}
		select {
		case <-v.v.Done():
			os.Remove(v.v.Dir())
			continue
		default:
		}
		left++
		if len(diags) < maxDiags {
			diags = append(diags, v.v.Diag().String())
		}
	}
	return left, diags
}

// maxDiags bounds the views a slow shutdown describes.
const maxDiags = 4
