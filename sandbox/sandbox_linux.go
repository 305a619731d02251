package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	_ "github.com/opencontainers/cgroups/devices" // device rules on cgroup v1 (docs/sandbox.md)
	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/fsview"
)

// Defaults from docs/sandbox.md.
const (
	DefaultPath     = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	helperInside    = "/.sluice/helper"
	defaultTmpBytes = 64 << 20
	// cgroupParent holds every sandbox cgroup, so a sweep finds them all.
	cgroupParent = "sluice"
)

// Limits confine one container.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64 // 0: no CPU limit
	Timeout     time.Duration
	TmpBytes    int64
	// OpenFiles is the files one container may hold open through its
	// view (max_open_files; 0: fsview.DefaultMaxOpen). Its processes get
	// RLIMIT_NOFILE a little above it: see nofileLimit.
	OpenFiles int64
}

// Mount is a read-only bind into the container: File is an O_PATH fd of
// an entry of the tool's view (see NewView), Dest its path inside the
// container (the same as on the host). The caller keeps File open until
// Create returns.
type Mount struct {
	File *os.File
	Dest string
}

// Spec is everything that makes a tool's containers.
type Spec struct {
	Mounts  []Mount
	Cwd     string   // inside the container; default "/"
	Env     []string // the whole environment: nothing is inherited
	Limits  Limits
	Seccomp *configs.Seccomp
	// View, when set, is the tool's view that Mounts come from: each
	// container's uid is admitted to it while the container lives.
	View *View
	// Scratch, when set, makes some directory mounts writable through
	// a per-box scratch layer (see ScratchSpec, Box.TakeScratch).
	Scratch *ScratchSpec
	// No uid or gid: the Runner gives each container its own (see
	// IDRange), so no Spec can run one as root or as a host account.

	// Egress: the container's loopback is up and sluiced listens on
	// 127.0.0.1:EgressPort in it (see egress_linux.go); false: no
	// interface is up.
	Egress bool
	// Seccomp compiled once for all the Spec's containers (see
	// seccompProgram); nil: compiled in each init by libcontainer.
	bpfOnce  sync.Once
	bpf      []byte
	bpfFlags uint
}

// ContainerUser is the name a container's own uid and gid have in its
// /etc/passwd and /etc/group.
const ContainerUser = "sluice"

// Runner creates containers. Its run dir holds libcontainer's state
// (state/), per-container rootfs dirs (rootfs/) and a minimal /etc per
// container uid (etc-<uid>/, a cache kept until Close).
type Runner struct {
	dir    string
	helper string
	// init is the sealed copy of sluice-init that every container's
	// init process runs (sealInit, internal/inithandoff).
	init *os.File
	// start starts a created container's init and its helper: c.Run;
	// tests stop between the two.
	start func(c *libcontainer.Container, p *libcontainer.Process) error
	log   *slog.Logger
	seq   atomic.Uint64
	bg    sync.WaitGroup // background destroys

	ids       *idAlloc
	etcCommon map[string][]byte // what every /etc copies from the host's
	etcMu     sync.Mutex
	etcMade   map[uint32]bool // uids whose etc-<uid> dir exists

	viewsMu sync.Mutex
	views   []*View

	idmapMu sync.Mutex
	idmaps  map[uint32]*os.File // user namespaces of caches' idmapped binds, by uid (idmapFor)

	ownsRootfsMount bool // the rootfs dir was mounted (tmpfs, private) by us
	ownsStateMount  bool // and the state dir
	// fillSlots bounds the pools' background creations, all pools
	// together, to one per core (see fillWorkers).
	fillSlots chan struct{}
	// noSeccompExport leaves seccomp compilation to libcontainer's init
	// (tests compare the two).
	noSeccompExport bool
	// helperStatus: the helper stays PID 1 and reports the command's
	// status on a pipe (sandbox/helper/helper.c).
	helperStatus bool
	prefix       string
	scope        string       // cgroup subtree of this run dir: PARENT/<scope>/<id>
	cgroups      CgroupLayout // where PARENT is
}

// ErrNotSupported is returned when this host cannot run sandboxes.
var ErrNotSupported = errors.New("sandbox not supported on this host")

// Options tune a Runner. The zero value is the default.
type Options struct {
	// IDs is the block of host ids containers run as, one uid (and the
	// same gid) per live container; zero means DefaultIDRange.
	IDs IDRange
	// Cgroups is where containers' cgroups go: the result of SetupCgroups,
	// computed once at start (zero: outside systemd, /sluice/...).
	Cgroups CgroupLayout
	// Init is the sluice-init binary every container's init runs
	// (empty: InitName beside the helper). It must be root's and
	// writable by no one else: see sealInit.
	Init string
}

// NewRunner is NewRunnerWith with the default Options.
func NewRunner(dir, helper string, log *slog.Logger) (*Runner, error) {
	return NewRunnerWith(dir, helper, log, Options{})
}

// NewRunnerWith prepares dir (created 0700), checks the helper binary,
// checks and seals the init binary (sealInit), and reads the host's
// account files: an id of the range that a host user or group (or an
// /etc/subuid or /etc/subgid entry) has is never handed out, and a range
// mostly taken that way is refused.
func NewRunnerWith(dir, helper string, log *slog.Logger, opts Options) (*Runner, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: sluiced must run as root to create containers with cgroup limits", ErrNotSupported)
	}
	st, err := os.Stat(helper)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("sandbox helper %s: not an executable file (build it with 'make build'): %v", helper, err)
	}
	// A helper that does not load the filter from fd 3 (an older build:
	// it ignores its arguments) would run commands without seccomp if
	// libcontainer were told to leave it to the helper: then libcontainer
	// compiles it in each init, as before.
	filters, status := helperFeatures(helper)
	noExport := !filters
	if noExport {
		log.Warn("sandbox helper does not load seccomp filters (an older build?); each container's init compiles the profile", "helper", helper)
	}
	if !status {
		log.Warn("sandbox helper does not report the command's status (an older build?); commands run as their container's PID 1, where a signal a command sends itself is lost", "helper", helper)
	}
	rng := opts.IDs
	if rng == (IDRange{}) {
		rng = DefaultIDRange
	}
	host, err := readHostIDs()
	if err != nil {
		return nil, err
	}
	initPath := opts.Init
	if initPath == "" {
		initPath = filepath.Join(filepath.Dir(helper), InitName)
	}
	initFile, err := sealInit(initPath)
	if err != nil {
		return nil, err
	}
	// Until the Runner is returned, a failure closes it; after, Close.
	ok := false
	defer func() {
		if !ok {
			initFile.Close()
		}
	}()
	r := &Runner{dir: dir, helper: helper, init: initFile, start: (*libcontainer.Container).Run, log: log,
		prefix: "s" + strconv.Itoa(os.Getpid()), scope: scopeOf(dir), cgroups: opts.Cgroups, etcMade: map[uint32]bool{},
		fillSlots: make(chan struct{}, fillWorkers()), noSeccompExport: noExport, helperStatus: status}
	if r.ids, err = newIDAlloc(rng, host, r.lookupHostID); err != nil {
		return nil, err
	}
	if n := r.ids.skipped(); n > 0 {
		log.Warn("container uid range overlaps host accounts; their ids are skipped", "range", rng.String(), "skipped", n)
	}
	// libcontainer logs through logrus; keep its chatter out of our logs.
	logrus.SetLevel(logrus.WarnLevel)
	for _, d := range []string{dir, r.stateDir(), r.rootfsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// Run dir and rootfs area stay 0700: containers reach their rootfs
	// through mounts root set up, never by a host path, and no local
	// user may reach a view's mount point (its path is in everyone's
	// mountinfo).
	for _, d := range []string{dir, r.rootfsDir()} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, err
		}
	}
	// The rootfs area is ours: found mounted (a crashed run left it) or
	// mounted now, it is unmounted on Close. The state dir is a tmpfs too
	// (a crashed run's stays mounted, so Sweep finds its containers); it
	// is unmounted on Close only when no container's state is left in it.
	if _, err = privatize(r.rootfsDir()); err != nil {
		return nil, err
	}
	r.ownsRootfsMount = true
	if _, err = privatize(r.stateDir()); err != nil {
		return nil, err
	}
	r.ownsStateMount = true
	// /etc dirs of an earlier run may hold an older loader cache: drop
	// them, and the shared etc/ of earlier versions.
	if err := r.removeEtcDirs(nil); err != nil {
		return nil, fmt.Errorf("prepare /etc: %w", err)
	}
	r.etcCommon = readEtcCommon()
	ok = true
	return r, nil
}

// lookupHostID is the allocator's user-database check, logged when it
// finds an account the files did not name.
func (r *Runner) lookupHostID(id uint32) (string, error) {
	owner, err := lookupHostID(id)
	if owner != "" {
		r.log.Warn("container uid belongs to a host account; skipped", "uid", id, "owner", owner)
	}
	return owner, err
}

// scopeOf names a run dir's cgroup subtree, so that runners in different
// run dirs (tests run several daemons at once) never sweep each other.
func scopeOf(dir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return hex.EncodeToString(sum[:4])
}

func (r *Runner) stateDir() string  { return filepath.Join(r.dir, "state") }
func (r *Runner) rootfsDir() string { return filepath.Join(r.dir, "rootfs") }

// readEtcCommon reads what every container's /etc copies from the
// host's: the loader cache (dynamic binaries need ld.so.cache) and the
// name-service config, time zone and MIME types.
func readEtcCommon() map[string][]byte {
	files := map[string][]byte{
		"hosts":    []byte("127.0.0.1\tlocalhost\n::1\tlocalhost\n"),
		"hostname": []byte("sluice\n"),
	}
	for _, name := range []string{"ld.so.cache", "nsswitch.conf", "localtime", "mime.types"} {
		if b, err := os.ReadFile(filepath.Join("/etc", name)); err == nil {
			files[name] = b
		}
	}
	return files
}

// etcDirID reports whether name is an /etc dir of the run dir, and whose:
// etc-<uid>, or the shared etc/ of earlier versions, or a temporary of
// either. removeEtcDirs removes them.
func etcDirID(name string) (uint32, bool) {
	base := strings.TrimSuffix(strings.TrimSuffix(name, ".new"), ".old")
	if base == "etc" {
		return 0, true
	}
	n, ok := strings.CutPrefix(base, "etc-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(n, 10, 32)
	return uint32(id), err == nil
}

// etcFor returns the read-only /etc of the containers that run as uid:
// RUN_DIR/etc-<uid>, made on first use and kept until Close, so a Create
// costs no extra mount or write. Its passwd and group name uid as
// ContainerUser, home /tmp, so getpwuid works (python's getpass, git,
// ssh) and libcontainer sets HOME=/tmp from it. The caller holds uid, so
// no one else writes this dir meanwhile.
func (r *Runner) etcFor(uid uint32) (string, error) {
	dir := filepath.Join(r.dir, "etc-"+strconv.FormatUint(uint64(uid), 10))
	r.etcMu.Lock()
	made := r.etcMade[uid]
	r.etcMu.Unlock()
	if made {
		return dir, nil
	}
	if err := writeEtc(dir, uid, r.etcCommon); err != nil {
		return "", fmt.Errorf("prepare /etc for uid %d: %w", uid, err)
	}
	r.etcMu.Lock()
	r.etcMade[uid] = true
	r.etcMu.Unlock()
	return dir, nil
}

func writeEtc(dir string, uid uint32, common map[string][]byte) error {
	tmp := dir + ".new"
	if err := removeTree(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "alternatives"), 0o755); err != nil {
		return err
	}
	files := map[string][]byte{
		"passwd": fmt.Appendf(nil, "root:x:0:0:root:/root:/usr/sbin/nologin\n"+
			"%s:x:%d:%d:sluice sandbox:/tmp:/usr/sbin/nologin\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", ContainerUser, uid, uid),
		"group": fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", ContainerUser, uid),
	}
	for name, b := range common {
		files[name] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := removeTree(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// removeEtcDirs removes the run dir's /etc dirs, except those of uids
// keep reports held.
func (r *Runner) removeEtcDirs(keep func(uint32) bool) error {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		id, ok := etcDirID(e.Name())
		if !ok || !e.IsDir() || (keep != nil && e.Name() != "etc" && keep(id)) {
			continue
		}
		errs = append(errs, removeTree(filepath.Join(r.dir, e.Name())))
		r.etcMu.Lock()
		delete(r.etcMade, id)
		r.etcMu.Unlock()
	}
	return errors.Join(errs...)
}

// Box is one created container whose first process (the helper) waits
// for an argv. It runs exactly one command and is then destroyed.
type Box struct {
	ID      string
	c       *libcontainer.Container
	proc    *libcontainer.Process
	stdin   *os.File
	stdout  *os.File
	stderr  *os.File
	rootfs  string
	uid     uint32 // and gid; held from the runner's range until Destroy
	view    *View  // admits uid until Destroy
	limits  Limits
	runner  *Runner
	cgroups map[string]string // controller -> path, read once at creation
	// limitFiles are the counters limitEvents reads, found at creation.
	limitFiles []limitFile
	// nsFiles hold the container's namespaces so that when its PID 1
	// exits the kernel does not tear them down (unmounting waits for RCU)
	// on the call's path; that happens when Destroy closes them, in the
	// background. Measured: /bin/true p50 2.62 -> 2.15 ms.
	nsFiles []*os.File
	egress  net.Listener // with Spec.Egress: see EgressListener
	// scratch is the box's scratch layer (Spec.Scratch) until
	// TakeScratch hands it over; Destroy frees it otherwise.
	scratch   *Scratch
	scratchMu sync.Mutex
	// status is where the helper, PID 1, reports how the command ended
	// ("exit N", "signal N"); nil with an older helper.
	status *os.File
	// statusLine is the helper's report, read by readStatus.
	statusLine string
	// exited closes when PID 1 has been reaped (waitProc, started once
	// through waitOnce), with its exitState and exitErr.
	exited    chan struct{}
	waitOnce  sync.Once
	exitState *os.ProcessState
	exitErr   error
	// onRelease, set by a pool, asks for a refill once this box's caller
	// releases it (see ExecHeld): a refill (tens of ms of CPU) started
	// earlier would compete with the very call that took the box.
	onRelease func()
	released  sync.Once
	once      sync.Once
	Created   time.Time
}

// Create makes a container for spec and starts its helper. The mounts'
// fds are read by the container's init while Create runs; after it
// returns the caller may close them.
//
// The container runs as the lowest free uid of the runner's range (no
// live box and no host account has it), its gid the same; with every id
// held, Create returns an *IDsExhaustedError. The id comes back only once
// the box is destroyed.
func (r *Runner) Create(spec *Spec) (*Box, error) {
	return r.CreateWith(spec, CreateOptions{})
}

// CreateOptions are what one box has beyond its Spec.
type CreateOptions struct {
	// Caches are bound read-write into the box (see Cache).
	Caches []CacheBind
}

// CreateWith is Create with options: caches bound into this box only.
func (r *Runner) CreateWith(spec *Spec, opt CreateOptions) (_ *Box, retErr error) {
	uid, err := r.ids.take()
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("%s-%d", r.prefix, r.seq.Add(1))
	rootfs := filepath.Join(r.rootfsDir(), id)
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		r.ids.give(uid)
		return nil, err
	}
	// On failure, in this order (defers run last first): the daemon's
	// premounts are detached, the container is destroyed, the rootfs is
	// removed, the uid is given back (by Destroy, once a box exists).
	// removeTree refuses to cross a mount, so the order matters.
	var b *Box
	if spec.View != nil {
		// Before anything runs as uid: the init's chdir and the
		// helper's first lookups come through the view.
		spec.View.admit(uid)
	}
	defer func() {
		if retErr != nil {
			if b != nil {
				b.Destroy()
			}
			removeTree(rootfs)
			if b == nil {
				if spec.View != nil {
					spec.View.revoke(uid)
				}
				r.ids.give(uid)
			}
		}
	}()
	etc, err := r.etcFor(uid)
	if err != nil {
		return nil, err
	}
	if err := mirrorTopLinks(rootfs); err != nil {
		return nil, err
	}
	premounts, scratch, err := r.premount(rootfs, spec, opt, uid)
	// The container gets its own copies of the premounts when it is set
	// up; the daemon's copies go as soon as Create returns.
	defer unmountAll(premounts)
	if err != nil {
		return nil, err
	}
	// Until a box holds it (then Destroy frees it), the scratch layer
	// is freed on failure here.
	defer func() {
		if retErr != nil && b == nil {
			scratch.Close()
		}
	}()
	cfg := r.config(spec, id, rootfs, etc)
	args := []string{helperInside}
	// fd 3 of the init process is sluice-init, which it becomes at once
	// (internal/inithandoff); the helper and the command find no fd 3.
	extra := []*os.File{r.init}
	if prog, flags := r.seccompProgram(spec); prog != nil {
		// The helper loads it from this fd (4), with flags, before it
		// reads the argv.
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		// The container has its copy of pr; the program fits the pipe
		// (at most 4096 instructions, 32 KiB).
		defer pr.Close()
		_, err = pw.Write(prog)
		pw.Close()
		if err != nil {
			return nil, fmt.Errorf("seccomp program: %w", err)
		}
		cfg.Seccomp = nil
		extra = append(extra, pr)
		args = append(args, strconv.Itoa(3+len(extra)-1), strconv.FormatUint(uint64(flags), 10))
	}
	var statusR *os.File
	if r.helperStatus {
		// The helper stays PID 1 and reports the command's end here.
		var statusW *os.File
		if statusR, statusW, err = os.Pipe(); err != nil {
			return nil, err
		}
		defer statusW.Close() // the container has its copy
		extra = append(extra, statusW)
		args = append(args, strconv.Itoa(3+len(extra)-1))
	}
	c, err := libcontainer.Create(r.stateDir(), id, cfg)
	if err != nil {
		if statusR != nil {
			statusR.Close()
		}
		return nil, fmt.Errorf("create container: %w", err)
	}
	b = &Box{ID: id, c: c, rootfs: rootfs, uid: uid, limits: spec.Limits, runner: r, view: spec.View, status: statusR, scratch: scratch, exited: make(chan struct{})}
	var inR, outW, errW *os.File
	if inR, b.stdin, err = os.Pipe(); err != nil {
		return nil, err
	}
	defer inR.Close() // the child's ends: the container has its copies
	if b.stdout, outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	defer outW.Close()
	if b.stderr, errW, err = os.Pipe(); err != nil {
		return nil, err
	}
	defer errW.Close()
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	b.proc = &libcontainer.Process{
		Args: args, Env: spec.Env, UID: int(uid), GID: int(uid), Cwd: cwd,
		Stdin: inR, Stdout: outW, Stderr: errW, ExtraFiles: extra, Init: true,
		// numeric, as libcontainer's init parses it (logrus.WarnLevel)
		LogLevel: strconv.Itoa(int(logrus.WarnLevel)),
	}
	// Known upstream leak: if the init dies after starting but before it
	// execs (a profile that forbids execve, OOM during setup), libcontainer
	// v1.5.3 leaves one goroutine blocked on its exec fifo forever: the
	// channel it would report on is never read again. Nothing here can
	// release it.
	if err := r.start(c, b.proc); err != nil {
		return nil, fmt.Errorf("start container: %w", err)
	}
	if st, err := c.State(); err == nil {
		b.cgroups = st.CgroupPaths // so a call reads limits without State()
		b.limitFiles = findLimitFiles(b.cgroups)
		for _, ns := range []string{"mnt", "net", "ipc", "uts", "cgroup", "pid"} {
			if f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", st.InitProcessPid, ns)); err == nil {
				b.nsFiles = append(b.nsFiles, f)
			}
		}
	}
	if spec.Egress {
		if err := b.listenEgress(); err != nil {
			return nil, err
		}
	}
	b.Created = time.Now()
	return b, nil
}

// mirrorTopLinks recreates the host's merged-usr links (/bin -> usr/bin
// …) in the rootfs; on a host where they are directories they are bound
// read-only instead (see config).
func mirrorTopLinks(rootfs string) error {
	for _, name := range []string{"bin", "sbin", "lib", "lib64", "lib32", "libx32"} {
		target, err := os.Readlink("/" + name)
		if err != nil {
			continue
		}
		if err := os.Symlink(target, filepath.Join(rootfs, name)); err != nil {
			return err
		}
	}
	return nil
}

const (
	roBind = unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
)

func (r *Runner) config(spec *Spec, id, rootfs, etc string) *configs.Config {
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=64k"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, Data: "mode=1777,size=16m"},
		{Source: "/usr", Destination: "/usr", Device: "bind", Flags: roBind},
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib64"} {
		if fi, err := os.Lstat("/" + name); err == nil && fi.IsDir() {
			mounts = append(mounts, &configs.Mount{Source: "/" + name, Destination: "/" + name, Device: "bind", Flags: roBind})
		}
	}
	mounts = append(mounts,
		&configs.Mount{Source: etc, Destination: "/etc", Device: "bind", Flags: roBind | unix.MS_NOEXEC})
	if fi, err := os.Stat("/etc/alternatives"); err == nil && fi.IsDir() {
		mounts = append(mounts, &configs.Mount{Source: "/etc/alternatives", Destination: "/etc/alternatives", Device: "bind", Flags: roBind})
	}
	mounts = append(mounts,
		&configs.Mount{Source: r.helper, Destination: helperInside, Device: "bind", Flags: roBind})
	// /tmp and the tool's mounts are already in the rootfs: see premount.
	var devs []*devices.Device
	var rules []*devices.Rule
	for _, d := range specconv.AllowedDevices {
		if d.Path == "" {
			continue // wildcard rules: nothing here may mknod
		}
		devs = append(devs, d)
		rules = append(rules, &d.Rule)
	}
	res := &cgroups.Resources{Devices: rules}
	nofile := nofileLimit(spec.Limits)
	if l := spec.Limits.MemoryBytes; l > 0 {
		res.Memory = l
		res.MemorySwap = l // memory+swap == memory: no swap
	}
	if spec.Limits.Pids > 0 {
		res.PidsLimit = &spec.Limits.Pids
	}
	if spec.Limits.CPUs > 0 {
		res.CpuPeriod = 100000
		res.CpuQuota = int64(spec.Limits.CPUs * 100000)
	}
	return &configs.Config{
		Rootfs:     rootfs,
		Readonlyfs: true,
		// Mount events never propagate back to the host.
		RootPropagation: unix.MS_PRIVATE | unix.MS_REC,
		Mounts:          mounts,
		Devices:         devs,
		Hostname:        "sluice",
		Namespaces: configs.Namespaces{
			{Type: configs.NEWNS}, {Type: configs.NEWPID}, {Type: configs.NEWIPC},
			{Type: configs.NEWUTS}, {Type: configs.NEWNET}, {Type: configs.NEWCGROUP},
		},
		// No capabilities in any set.
		Capabilities:    &configs.Capabilities{},
		NoNewPrivileges: true,
		Cgroups:         &cgroups.Cgroup{Path: r.cgroupPath(id), Resources: res},
		MaskPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/proc/interrupts", "/sys/firmware"},
		ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		Rlimits: []configs.Rlimit{
			{Type: unix.RLIMIT_NOFILE, Hard: nofile, Soft: nofile},
			{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
		},
		Seccomp:      spec.Seccomp,
		NoNewKeyring: true,
		// No ParentDeathSignal: the kernel sends it when the parent
		// *thread* exits, and Go retires threads (libcontainer's own
		// mount-source goroutine ends a locked one), which killed inits
		// mid-start under load. A daemon crash is handled by Sweep.
	}
}

// nofileSlack is how many fds a container's process may have beyond
// what its view lets the whole container hold open: stdio, pipes,
// sockets, and files of /usr, /etc and /tmp, none of which pin an fd of
// sluiced's.
const nofileSlack = 64

// nofileLimit is a container's RLIMIT_NOFILE (soft and hard): the view's
// cap plus nofileSlack, so a process learns EMFILE from its own limit
// about where the view would refuse it. The limit is per process and the
// view's cap per container, so the view's cap is what bounds sluiced.
// It is never above sluiced's own hard limit: raising a hard limit takes
// CAP_SYS_RESOURCE, which a daemon in a container may lack, and the init
// would then fail to start.
func nofileLimit(l Limits) uint64 {
	n := l.OpenFiles
	if n <= 0 {
		n = fsview.DefaultMaxOpen
	}
	want := uint64(n) + nofileSlack
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Max < want {
		return lim.Max
	}
	return want
}

// Result is what one command did.
type Result struct {
	ExitCode  int // 128+signal when killed
	Signal    int // the signal that killed it, or 0
	Stdout    []byte
	Stderr    []byte
	Truncated bool // stdout or stderr had more than the cap
	TimedOut  bool
	OOM       bool // the memory limit was hit and the OOM killer ran
	PidsMax   bool // fork failed at the pids limit
	Duration  time.Duration
}

// Chunk is output as it arrives, for streaming.
type Chunk struct {
	Stream string // stdout or stderr
	Data   []byte
}

// Exec hands argv to the waiting helper and waits for the command, at most
// limits.Timeout or until ctx is done (then every process is killed).
// stdout and stderr are each kept up to max bytes; the rest is drained and
// dropped so the command never blocks on a full pipe. onChunk, if set, gets
// the kept bytes as they arrive. When Exec returns every process of the
// box is dead (PID 1 exited, so the kernel killed its pid namespace) and
// the box is being destroyed in the background (Runner.Wait waits for it).
func (b *Box) Exec(ctx context.Context, argv []string, max int64, onChunk func(Chunk)) (*Result, error) {
	defer b.Release()
	return b.ExecHeld(ctx, argv, max, onChunk)
}

// ExecHeld is Exec without the release: when it returns every process of
// the box is dead, as with Exec, but for the helper (PID 1) when it has
// reported the command's end and is all that is left (it then only
// exits); the caller calls Release when it is
// ready for the box's destruction (and its pool's refill) to start. The
// daemon answers its caller first: destroying a box and creating the next
// are ~17 ms of CPU that would otherwise compete, on a small machine,
// with the call's own result record and reply.
func (b *Box) ExecHeld(ctx context.Context, argv []string, max int64, onChunk func(Chunk)) (*Result, error) {
	start := time.Now()
	res := &Result{}
	var wg sync.WaitGroup
	var emitMu sync.Mutex
	emit := func(stream string) func([]byte) {
		if onChunk == nil {
			return nil
		}
		return func(p []byte) {
			emitMu.Lock()
			onChunk(Chunk{Stream: stream, Data: p})
			emitMu.Unlock()
		}
	}
	var outTrunc, errTrunc bool
	wg.Add(2)
	go func() { defer wg.Done(); res.Stdout, outTrunc = capRead(b.stdout, max, emit("stdout")) }()
	go func() { defer wg.Done(); res.Stderr, errTrunc = capRead(b.stderr, max, emit("stderr")) }()

	if b.view != nil {
		b.view.sync()
	}
	var werr error
	if ctx.Err() == nil {
		var msg []byte
		for _, a := range argv {
			msg = append(append(msg, a...), 0)
		}
		_, werr = b.stdin.Write(msg)
	}
	// A context ended already (a call cancelled while it waited for the
	// pool or for a cold box) hands over nothing: the helper reads an
	// empty stdin and exits without running anything. Written and then
	// killed, the command ran at times to its end
	// (TestCancelledBeforeExecRunsNothing).
	b.stdin.Close()
	if werr != nil {
		return nil, fmt.Errorf("hand argv to helper: %w", werr)
	}

	// The helper reports how the command ended on the status pipe once
	// it has reaped it, then exits. When the command left nothing behind
	// (the box's cgroup holds the helper alone) the call need not wait
	// for PID 1's own exit (~0.35 ms on the path of every call): nothing
	// but the helper, whose last act is exiting, can run in the box any
	// more. Otherwise, and on a timeout or a cancel, PID 1's exit, which
	// kills the whole pid namespace, ends the call as before.
	b.waitOnce.Do(func() { go b.waitProc() })
	var status <-chan struct{}
	if b.status != nil {
		status = b.readStatus()
	}
	timeout := b.limits.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	early := false
	select {
	case <-b.exited:
	case <-status:
		if _, _, ok := b.reported(); ok {
			// The command has ended; its output ends with it unless
			// something it started holds the pipes, which the
			// helper's exit (next) ends too.
			wg.Wait()
			early = b.onlyHelperLeft()
		}
	case <-timer.C:
		res.TimedOut = true
		b.kill()
	case <-ctx.Done():
		b.kill()
	}
	if !early {
		<-b.exited
	}
	if status != nil {
		<-status // the status line is read (PID 1 is gone or has told it)
	}
	// PID 1 is gone (or, early, is all that is left and only exits), so
	// every write end of the pipes is closed; the readers finish.
	wg.Wait()
	res.Truncated = outTrunc || errTrunc
	res.Duration = time.Since(start)
	if !early { // early: the helper's report, below, is how it ended
		res.ExitCode, res.Signal = exitStatus(b.exitState, b.exitErr)
	}
	if code, sig, ok := b.reported(); ok {
		res.ExitCode, res.Signal = code, sig
	}
	res.OOM, res.PidsMax = b.limitEvents()
	if ctx.Err() != nil && !res.TimedOut {
		return res, ctx.Err()
	}
	return res, nil
}

// waitProc reaps PID 1 (the helper) and closes b.exited: once per box,
// by ExecHeld, whose call may return before it (see there); Destroy waits
// for it rather than waiting a second time.
func (b *Box) waitProc() {
	b.exitState, b.exitErr = b.proc.Wait()
	close(b.exited)
}

// readStatus reads the helper's status line ("exit N\n", "signal N\n")
// in the background; the channel closes when the line is complete, or
// when the pipe ends without one (PID 1 killed, or gone).
func (b *Box) readStatus() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [64]byte
		n := 0
		for n < len(buf) {
			m, err := b.status.Read(buf[n:])
			n += m
			if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
				b.statusLine = string(buf[:i])
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return done
}

// onlyHelperLeft tells whether the box's cgroup holds no process but
// PID 1, read from the kernel (cgroup.procs lists no process whose
// threads have all exited). A command's leftover (a daemon it started, a
// process ignoring the end) keeps it false: the call then waits for PID
// 1's exit, which kills them all. Unreadable: false.
func (b *Box) onlyHelperLeft() bool {
	dir, ok := b.cgroups["pids"]
	if !ok {
		if dir, ok = b.cgroups[""]; !ok {
			return false
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	pid, err := b.proc.Pid()
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err != nil || n != pid {
			return false
		}
	}
	return true
}

// reported is how the command ended, as the helper (PID 1) told it on
// the status pipe; ok is false with an older helper, or when the helper
// itself was killed (a timeout, a cancel) before it could tell.
func (b *Box) reported() (code, sig int, ok bool) {
	kind, num, found := strings.Cut(strings.TrimSpace(b.statusLine), " ")
	v, err := strconv.Atoi(num)
	switch {
	case !found || err != nil || v < 0 || v > 255:
		return 0, 0, false
	case kind == "exit":
		return v, 0, true
	case kind == "signal" && v > 0 && v < 128:
		return 128 + v, v, true
	}
	return 0, 0, false
}

func (b *Box) kill() {
	if err := b.c.Signal(unix.SIGKILL); err != nil {
		b.runner.log.Debug("kill container", "id", b.ID, "err", err)
	}
}

func exitStatus(ps *os.ProcessState, err error) (code, sig int) {
	if ps == nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return -1, 0
		}
		ps = ee.ProcessState
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ps.ExitCode(), 0
}

// limitFile is a cgroup counter that tells a limit was hit: the OOM
// killer ran (memory), a fork failed at pids.max (pids).
type limitFile struct {
	path, key string
	pids      bool // else memory
}

// findLimitFiles finds, once when the box is made, which of the cgroup
// v1 and v2 counter files its cgroups have: on a v1 host with ten
// hierarchies, trying all three in each at every call was 30 opens,
// 0.2-0.4 ms of a pooled call; it is two now. The counters live only in
// the memory and pids hierarchies (v1) or the unified one (v2, key ""):
// the other hierarchies are not looked in.
func findLimitFiles(cgroups map[string]string) []limitFile {
	var out []limitFile
	for _, c := range []struct {
		controller string
		files      []limitFile
	}{
		{"memory", []limitFile{{path: "memory.oom_control", key: "oom_kill"}, {path: "memory.events", key: "oom_kill"}}},
		{"pids", []limitFile{{path: "pids.events", key: "max", pids: true}}},
		{"", []limitFile{{path: "memory.events", key: "oom_kill"}, {path: "pids.events", key: "max", pids: true}}},
	} {
		dir, ok := cgroups[c.controller]
		if !ok {
			continue
		}
		for _, f := range c.files {
			f.path = filepath.Join(dir, f.path)
			if _, err := os.Stat(f.path); err == nil {
				out = append(out, f)
			}
		}
	}
	return out
}

// limitEvents reads the container's cgroup counters: did the OOM killer
// run, did a fork fail at the pids limit.
func (b *Box) limitEvents() (oom, pidsMax bool) {
	for _, f := range b.limitFiles {
		if counter(f.path, f.key) > 0 {
			if f.pids {
				pidsMax = true
			} else {
				oom = true
			}
		}
	}
	return oom, pidsMax
}

func counter(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// MemoryUsage is the container's current memory charge (what a waiting
// pool container costs).
func (b *Box) MemoryUsage() int64 {
	for _, p := range b.cgroups {
		for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
			if data, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
				return n
			}
		}
	}
	return 0
}

// Release destroys b in the background (Runner.Wait waits for it) and
// tells its pool to refill. Only the first call does anything.
func (b *Box) Release() {
	b.released.Do(func() {
		if b.onRelease != nil {
			b.onRelease()
		}
		b.runner.bg.Add(1)
		go func() {
			defer b.runner.bg.Done()
			b.Destroy()
		}()
	})
}

// Wait returns once every box handed to Release is destroyed.
func (r *Runner) Wait() { r.bg.Wait() }

// UID is the host uid the box's processes run as; their gid is the same
// number. No other live box of its runner has it.
func (b *Box) UID() int { return int(b.uid) }

// Destroy kills whatever runs in the box and removes its cgroups, state
// and rootfs, then gives its uid back to the runner. It is safe to call
// more than once.
func (b *Box) Destroy() {
	b.once.Do(func() {
		gone := true // nothing can run as b.uid any more
		if b.c != nil {
			b.kill()
			if b.proc != nil {
				b.waitOnce.Do(func() { go b.waitProc() })
				select {
				case <-b.exited:
				case <-time.After(5 * time.Second):
				}
			}
			if err := b.c.Destroy(); err != nil {
				b.runner.log.Warn("destroy container; its uid stays out of use", "id", b.ID, "uid", b.uid, "err", err)
				gone = false
			}
		}
		if b.egress != nil {
			b.egress.Close()
		}
		for _, f := range append([]*os.File{b.stdin, b.stdout, b.stderr, b.status}, b.nsFiles...) {
			if f != nil {
				f.Close()
			}
		}
		if err := removeTree(b.rootfs); err != nil {
			b.runner.log.Warn("remove rootfs", "id", b.ID, "err", err)
		}
		b.dropScratch()
		if gone {
			if b.view != nil {
				b.view.revoke(b.uid) // nothing runs as uid: before it is handed out again
			}
			b.runner.ids.give(b.uid)
		}
	})
}

// capRead reads r to EOF, keeping at most max bytes (reading max+1 to know
// there was more) and dropping the rest, so memory stays flat however much
// the command prints.
func capRead(r io.Reader, limit int64, emit func([]byte)) ([]byte, bool) {
	var kept []byte
	truncated := false
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			room := limit - int64(len(kept))
			take := int64(n)
			if take > room {
				take = max(room, 0)
				truncated = true
			}
			if take > 0 {
				kept = append(kept, buf[:take]...)
				if emit != nil {
					emit(append([]byte(nil), buf[:take]...))
				}
			}
		}
		if err != nil {
			return kept, truncated
		}
	}
}
