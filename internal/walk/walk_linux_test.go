//go:build linux

package walk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// never stands for a tool's never globs ".env", "*.pem", "private/**".
func never(rel, name string, isDir bool) bool {
	return name == ".env" || strings.HasSuffix(name, ".pem") || rel == "private" || strings.HasPrefix(rel, "private/")
}

// The needle is in files that are shown, in never-listed ones and
// directories, and outside the root.
const needle = "NEEDLE"

// fixture builds base/root (the walk's root) and base/outside. With
// hidden, root also holds never-listed files and directories, each with
// the needle and names that match every glob the tests use; without,
// the tree is the same minus them. Whatever a walk returns must not
// differ between the two.
func fixture(t testing.TB, hidden bool) (base, root string) {
	t.Helper()
	base = t.TempDir()
	root = filepath.Join(base, "root")
	files := map[string]string{
		"outside/secret.txt":     needle + " outside\n",
		"root/a.go":              "package a\n\nfunc " + needle + "() {}\n",
		"root/b.txt":             "nothing here\n",
		"root/src/main.go":       "package main\nvar x = \"" + needle + "\"\n",
		"root/src/bin.dat":       "\x00" + needle + "\n",
		"root/src/deep/x/y/z.go": needle + " deep\n",
	}
	if hidden {
		for p, c := range map[string]string{
			"root/.env":                    needle + "=1\n",
			"root/k.pem":                   needle + "\n",
			"root/private/needle.go":       needle + " private\n",
			"root/private/sub/deeper.go":   needle + "\n",
			"root/src/secrets.pem/a.go":    needle + "\n",
			"root/src/secrets.pem/x/z.go":  needle + "\n",
			"root/src/.env":                needle + "\n",
			"root/src/deep/x/y/.env":       needle + "\n",
			"root/src/deep/x/y/zz.go.pem":  needle + "\n",
			"root/src/deep/x/private/a.go": needle + " shown: private/** is anchored at the root\n",
		} {
			files[p] = c
		}
	} else {
		files["root/src/deep/x/private/a.go"] = needle + " shown: private/** is anchored at the root\n"
	}
	for p, c := range files {
		p = filepath.Join(base, p)
		testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		testutil.Must(t, os.WriteFile(p, []byte(c), 0o644))
	}
	for link, target := range map[string]string{
		"link-out": "../outside", "link-secret": "../outside/secret.txt",
		"loop1": "loop2", "loop2": "loop1", "self": ".", "abs": "/etc",
	} {
		testutil.Must(t, os.Symlink(target, filepath.Join(root, link)))
	}
	testutil.Must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	if hidden {
		testutil.Must(t, os.Symlink("../outside", filepath.Join(root, "private", "link")))
		testutil.Must(t, unix.Mkfifo(filepath.Join(root, "private", "fifo"), 0o644))
	}
	return base, root
}

// openDir opens dir as the daemon would hand it to the walk: a securefs
// root and a handle (O_PATH) on it.
func openDir(t testing.TB, dir, rel string) *os.File {
	t.Helper()
	r, err := securefs.OpenRoot(dir, securefs.ModeOpenat2)
	testutil.Must(t, err)
	h, err := r.Resolve(rel)
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); r.Close() })
	return h.File()
}

// watchOpens checks every fd the walk opens by what the kernel says it
// is: beneath root, and open for reading only if a regular file or a
// directory (a FIFO or device is at most O_PATH).
func watchOpens(t testing.TB, root string) *[]string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	testHookOpen = func(fd int) {
		p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		var st unix.Stat_t
		serr := unix.Fstat(fd, &st)
		fl, ferr := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, p)
		switch {
		case err != nil || serr != nil || ferr != nil:
			t.Errorf("opened fd %d: readlink %v, fstat %v, fcntl %v", fd, err, serr, ferr)
		case p != root && !strings.HasPrefix(p, root+"/"):
			t.Errorf("ESCAPE: the walk opened %s, outside %s", p, root)
		case fl&unix.O_PATH == 0 && kindOfMode(st.Mode) != kFile && kindOfMode(st.Mode) != kDir:
			t.Errorf("the walk opened %s (mode %o) for I/O", p, st.Mode)
		}
	}
	t.Cleanup(func() { testHookOpen = nil })
	return &seen
}

type mode struct {
	name     string
	fallback bool
}

var modes = []mode{{"openat2", false}, {"openat", true}}

func opts(m mode, o Options) Options {
	if o.Skip == nil {
		o.Skip = never
	}
	o.fallback = m.fallback
	return o
}

func mustRE(s string) *regexp.Regexp { return regexp.MustCompile(s) }

func mustGlob(s string) func(string) bool {
	g, err := Glob(s)
	if err != nil {
		panic(err)
	}
	return g
}

func lines(ls ...string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.Join(ls, "\n") + "\n"
}

var allNames = lines(
	`{"path":"a.go","type":"file"}`,
	`{"path":"abs","type":"symlink"}`,
	`{"path":"b.txt","type":"file"}`,
	`{"path":"fifo","type":"other"}`,
	`{"path":"link-out","type":"symlink"}`,
	`{"path":"link-secret","type":"symlink"}`,
	`{"path":"loop1","type":"symlink"}`,
	`{"path":"loop2","type":"symlink"}`,
	`{"path":"self","type":"symlink"}`,
	`{"path":"src","type":"dir"}`,
	`{"path":"src/bin.dat","type":"file"}`,
	`{"path":"src/deep","type":"dir"}`,
	`{"path":"src/deep/x","type":"dir"}`,
	`{"path":"src/deep/x/private","type":"dir"}`,
	`{"path":"src/deep/x/private/a.go","type":"file"}`,
	`{"path":"src/deep/x/y","type":"dir"}`,
	`{"path":"src/deep/x/y/z.go","type":"file"}`,
	`{"path":"src/main.go","type":"file"}`,
)

var needleLines = lines(
	`{"path":"a.go","line":3,"text":"func NEEDLE() {}"}`,
	`{"path":"src/deep/x/private/a.go","line":1,"text":"NEEDLE shown: private/** is anchored at the root"}`,
	`{"path":"src/deep/x/y/z.go","line":1,"text":"NEEDLE deep"}`,
	`{"path":"src/main.go","line":2,"text":"var x = \"NEEDLE\""}`,
)

// searchCase is one row of the table every search test runs.
type searchCase struct {
	name   string
	rel    string // start directory beneath root ("." when empty)
	q      Query
	o      Options
	want   string
	limits []string
}

var searchCases = []searchCase{
	{name: "every name", q: Query{Name: mustGlob("*")}, want: allNames},
	{name: "go files", q: Query{Name: mustGlob("*.go")}, want: lines(
		`{"path":"a.go","type":"file"}`,
		`{"path":"src/deep/x/private/a.go","type":"file"}`,
		`{"path":"src/deep/x/y/z.go","type":"file"}`,
		`{"path":"src/main.go","type":"file"}`)},
	{name: "hidden names match nothing", q: Query{Name: mustGlob("*needle*")}, want: ""},
	{name: "pem and env", q: Query{Name: mustGlob("*.[pe][en][mv]")}, want: ""},
	{name: "content", q: Query{Content: mustRE(needle)}, want: needleLines},
	{name: "content in go files", q: Query{Name: mustGlob("z.go"), Content: mustRE(needle)}, want: lines(
		`{"path":"src/deep/x/y/z.go","line":1,"text":"NEEDLE deep"}`)},
	{name: "anchored content", q: Query{Content: mustRE(`^NEEDLE`)}, want: lines(
		`{"path":"src/deep/x/private/a.go","line":1,"text":"NEEDLE shown: private/** is anchored at the root"}`,
		`{"path":"src/deep/x/y/z.go","line":1,"text":"NEEDLE deep"}`)},
	{name: "outside text is never found", q: Query{Content: mustRE(`outside|private\n|=1`)}, want: ""},
	{name: "from a subdirectory", rel: "src/deep", q: Query{Content: mustRE(needle)}, want: lines(
		`{"path":"x/private/a.go","line":1,"text":"NEEDLE shown: private/** is anchored at the root"}`,
		`{"path":"x/y/z.go","line":1,"text":"NEEDLE deep"}`)},
	{name: "max_results exact is not truncated", q: Query{Content: mustRE(needle)}, o: Options{MaxResults: 4}, want: needleLines},
	{name: "max_results", q: Query{Content: mustRE(needle)}, o: Options{MaxResults: 2},
		want: lines(strings.Split(needleLines, "\n")[:2]...), limits: []string{LimitResults}},
	{name: "max_results names", q: Query{Name: mustGlob("*")}, o: Options{MaxResults: 3},
		want: lines(strings.Split(allNames, "\n")[:3]...), limits: []string{LimitResults}},
	{name: "max_bytes cuts at a whole line", q: Query{Content: mustRE(needle)}, o: Options{MaxBytes: int64(len(needleLines) - 1)},
		want: lines(strings.Split(needleLines, "\n")[:3]...), limits: []string{LimitBytes}},
	{name: "max_bytes exact", q: Query{Content: mustRE(needle)}, o: Options{MaxBytes: int64(len(needleLines))}, want: needleLines},
	{name: "max_depth", q: Query{Name: mustGlob("*.go")}, o: Options{MaxDepth: 2},
		want: lines(`{"path":"a.go","type":"file"}`, `{"path":"src/main.go","type":"file"}`), limits: []string{LimitDepth}},
	{name: "max_entries", q: Query{Name: mustGlob("*")}, o: Options{MaxEntries: 5},
		want: lines(strings.Split(allNames, "\n")[:5]...), limits: []string{LimitEntries}},
	{name: "max_file_bytes", q: Query{Content: mustRE(needle)}, o: Options{MaxFileBytes: 12}, want: lines(
		`{"path":"src/deep/x/private/a.go","line":1,"text":"NEEDLE shown"}`,
		`{"path":"src/deep/x/y/z.go","line":1,"text":"NEEDLE deep"}`), limits: []string{LimitFileBytes}},
	{name: "max_line_bytes", q: Query{Content: mustRE(`deep|private`)}, o: Options{MaxLineBytes: 9}, want: lines(
		`{"path":"src/deep/x/private/a.go","line":1,"text":"NEEDLE sh","cut":true}`,
		`{"path":"src/deep/x/y/z.go","line":1,"text":"NEEDLE de","cut":true}`)},
	{name: "one worker", q: Query{Content: mustRE(needle)}, o: Options{Workers: 1}, want: needleLines},
}

// TestSearch runs the table against both resolvers, checking each fd the
// walk opened.
func TestSearch(t *testing.T) {
	_, root := fixture(t, true)
	for _, m := range modes {
		for _, c := range searchCases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				watchOpens(t, root)
				rel := c.rel
				if rel == "" {
					rel = "."
				}
				r, err := Search(context.Background(), openDir(t, root, rel), c.q, opts(m, c.o))
				testutil.Must(t, err)
				if string(r.Out) != c.want {
					t.Errorf("got\n%s\nwant\n%s", r.Out, c.want)
				}
				if r.Truncated != (len(c.limits) > 0) || !reflect.DeepEqual(r.Limits, c.limits) {
					t.Errorf("truncated %v limits %q, want %q", r.Truncated, r.Limits, c.limits)
				}
				if r.Records != strings.Count(c.want, "\n") {
					t.Errorf("records %d", r.Records)
				}
				if max := c.o.MaxBytes; max > 0 && int64(len(r.Out)) > max {
					t.Errorf("%d bytes > max_bytes %d", len(r.Out), max)
				}
			})
		}
	}
}

// TestSearchStats: binary files are not searched, symlinks and the FIFO
// are listed and never opened.
func TestSearchStats(t *testing.T) {
	_, root := fixture(t, false)
	for _, m := range modes {
		seen := watchOpens(t, root)
		r, err := Search(context.Background(), openDir(t, root, "."), Query{Content: mustRE(needle)}, opts(m, Options{}))
		testutil.Must(t, err)
		want := Stats{Dirs: 5, Files: 6, Symlinks: 6, Other: 1, FilesRead: 6, Binary: 1}
		if r.Stats != want {
			t.Errorf("%s: stats %+v, want %+v", m.name, r.Stats, want)
		}
		for _, p := range *seen {
			if strings.HasSuffix(p, "/fifo") || strings.Contains(p, "link") || strings.Contains(p, "loop") || strings.HasSuffix(p, "/self") {
				t.Errorf("%s: opened %s", m.name, p)
			}
		}
		testHookOpen = nil
	}
}

// TestHiddenLeavesNoTrace runs searches and listings on the fixture with
// and without its never-listed entries: everything in the result — the
// output, the record count, the truncation, the limits and the stats —
// must be the same, so nothing about a hidden name or its content can be
// learned, not even that it exists. With SkipNone the results do differ
// (the test can see a leak).
func TestHiddenLeavesNoTrace(t *testing.T) {
	_, hidden := fixture(t, true)
	_, clean := fixture(t, false)
	type run func(dir *os.File, o Options) (*Result, error)
	search := func(q Query) run {
		return func(dir *os.File, o Options) (*Result, error) { return Search(context.Background(), dir, q, o) }
	}
	tree := func(depth int, sizes bool) run {
		return func(dir *os.File, o Options) (*Result, error) {
			return Tree(context.Background(), dir, depth, sizes, o)
		}
	}
	runs := map[string]run{
		"tree 1":     tree(1, true),
		"tree 2":     tree(2, false),
		"tree all":   tree(64, true),
		"tree deep":  tree(100, true),
		"names":      search(Query{Name: mustGlob("*")}),
		"go names":   search(Query{Name: mustGlob("*.go")}),
		"needle":     search(Query{Content: mustRE(needle)}),
		"needle ^":   search(Query{Content: mustRE("^" + needle)}),
		"every line": search(Query{Content: mustRE("")}),
	}
	var caps []Options
	for _, n := range []int{1, 2, 3, 5, 8, 13} {
		caps = append(caps, Options{MaxResults: n}, Options{MaxEntries: n}, Options{MaxBytes: int64(n * 20)}, Options{MaxDepth: n})
	}
	caps = append(caps, Options{}, Options{MaxFileBytes: 5})
	for _, m := range modes {
		for name, fn := range runs {
			for _, o := range caps {
				a, err := fn(openDir(t, hidden, "."), opts(m, o))
				testutil.Must(t, err)
				b, err := fn(openDir(t, clean, "."), opts(m, o))
				testutil.Must(t, err)
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s %s %+v: with hidden entries\n%+v\n%s\nwithout\n%+v\n%s", m.name, name, o, a.Stats, a.Out, b.Stats, b.Out)
				}
			}
		}
		// The differential sees a leak where there is one.
		o := opts(m, Options{Skip: SkipNone})
		a, err := Search(context.Background(), openDir(t, hidden, "."), Query{Content: mustRE(needle)}, o)
		testutil.Must(t, err)
		b, err := Search(context.Background(), openDir(t, clean, "."), Query{Content: mustRE(needle)}, o)
		testutil.Must(t, err)
		if reflect.DeepEqual(a, b) || !strings.Contains(string(a.Out), "private/needle.go") {
			t.Errorf("%s: without a skip filter the hidden needle is not found: the test proves nothing\n%s", m.name, a.Out)
		}
	}
}

func TestTree(t *testing.T) {
	_, root := fixture(t, true)
	size := func(p string) int64 {
		fi, err := os.Lstat(filepath.Join(root, p))
		testutil.Must(t, err)
		return fi.Size()
	}
	one := lines(
		fmt.Sprintf(`{"name":"a.go","type":"file","size":%d}`, size("a.go")),
		`{"name":"abs","type":"symlink","size":0}`,
		fmt.Sprintf(`{"name":"b.txt","type":"file","size":%d}`, size("b.txt")),
		`{"name":"fifo","type":"other","size":0}`,
		`{"name":"link-out","type":"symlink","size":0}`,
		`{"name":"link-secret","type":"symlink","size":0}`,
		`{"name":"loop1","type":"symlink","size":0}`,
		`{"name":"loop2","type":"symlink","size":0}`,
		`{"name":"self","type":"symlink","size":0}`,
		`{"name":"src","type":"dir","size":0}`,
	)
	cases := []struct {
		name   string
		depth  int
		sizes  bool
		o      Options
		want   string
		limits []string
	}{
		{name: "depth 1 is a one-level list", depth: 1, sizes: true, want: one},
		{name: "depth 0 is 1", depth: 0, sizes: true, want: one},
		{name: "depth 3", depth: 3, want: lines(
			`{"name":"a.go","type":"file"}`, `{"name":"abs","type":"symlink"}`, `{"name":"b.txt","type":"file"}`,
			`{"name":"fifo","type":"other"}`, `{"name":"link-out","type":"symlink"}`, `{"name":"link-secret","type":"symlink"}`,
			`{"name":"loop1","type":"symlink"}`, `{"name":"loop2","type":"symlink"}`, `{"name":"self","type":"symlink"}`,
			`{"name":"src","type":"dir"}`, `{"name":"src/bin.dat","type":"file"}`, `{"name":"src/deep","type":"dir"}`,
			`{"name":"src/deep/x","type":"dir"}`, `{"name":"src/main.go","type":"file"}`)},
		{name: "depth beyond max_depth", depth: 9, o: Options{MaxDepth: 2}, want: lines(
			`{"name":"a.go","type":"file"}`, `{"name":"abs","type":"symlink"}`, `{"name":"b.txt","type":"file"}`,
			`{"name":"fifo","type":"other"}`, `{"name":"link-out","type":"symlink"}`, `{"name":"link-secret","type":"symlink"}`,
			`{"name":"loop1","type":"symlink"}`, `{"name":"loop2","type":"symlink"}`, `{"name":"self","type":"symlink"}`,
			`{"name":"src","type":"dir"}`, `{"name":"src/bin.dat","type":"file"}`, `{"name":"src/deep","type":"dir"}`,
			`{"name":"src/main.go","type":"file"}`),
			limits: []string{LimitDepth}},
		{name: "max_bytes", depth: 1, sizes: true, o: Options{MaxBytes: int64(len(one) - 1)},
			want: lines(strings.Split(one, "\n")[:9]...), limits: []string{LimitBytes}},
	}
	for _, m := range modes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				watchOpens(t, root)
				r, err := Tree(context.Background(), openDir(t, root, "."), c.depth, c.sizes, opts(m, c.o))
				testutil.Must(t, err)
				if string(r.Out) != c.want {
					t.Errorf("got\n%s\nwant\n%s", r.Out, c.want)
				}
				if !reflect.DeepEqual(r.Limits, c.limits) || r.Truncated != (len(c.limits) > 0) {
					t.Errorf("limits %q, want %q", r.Limits, c.limits)
				}
			})
		}
	}
}

// TestSpecialFilesNeverOpened hands searchFile, as a racing rename would,
// names the walk listed as regular files that are now a FIFO, a device,
// a symlink out and a directory: none is opened for reading, none
// blocks (a blocking FIFO open would hang the test).
func TestSpecialFilesNeverOpened(t *testing.T) {
	testutil.RequireRoot(t)
	base, root := fixture(t, false)
	testutil.Must(t, unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))))
	testutil.Must(t, os.Symlink(filepath.Join(base, "outside/secret.txt"), filepath.Join(root, "abs-secret")))
	for _, m := range modes {
		watchOpens(t, root)
		w := newWalker(context.Background(), opts(m, Options{}))
		testutil.Must(t, w.o.normalize())
		d, err := w.start(openDir(t, root, "."))
		testutil.Must(t, err)
		mt := newMatcher(mustRE(""))
		var buf []byte
		var sum tally
		for _, name := range []string{"fifo", "null", "link-secret", "abs-secret", "src", "self", "gone"} {
			j := &fileJob{dir: d, name: name}
			w.searchFile(j, mt, &buf)
			if len(j.out) != 0 {
				t.Errorf("%s: %s was searched: %s", m.name, name, j.out)
			}
			sum.add(&j.t)
		}
		d.release()
		if sum.s != (Stats{Changed: 7}) {
			t.Errorf("%s: stats %+v, want 7 changed, none read", m.name, sum.s)
		}
		testHookOpen = nil
	}
}

func TestHardLinksRefused(t *testing.T) {
	_, root := fixture(t, false)
	testutil.Must(t, os.Mkdir(filepath.Join(root, "hl"), 0o755))
	testutil.Must(t, os.Link(filepath.Join(root, "a.go"), filepath.Join(root, "hl", "a.go")))
	testutil.Must(t, os.Link(filepath.Join(root, "a.go"), filepath.Join(root, "hl", "b.go")))
	for _, m := range modes {
		r, err := Search(context.Background(), openDir(t, root, "hl"), Query{Content: mustRE(needle)}, opts(m, Options{RefuseHardLinks: true}))
		testutil.Must(t, err)
		if len(r.Out) != 0 || r.Stats.HardLinked != 2 {
			t.Errorf("%s: %s %+v", m.name, r.Out, r.Stats)
		}
		r, err = Search(context.Background(), openDir(t, root, "hl"), Query{Content: mustRE(needle)}, opts(m, Options{}))
		testutil.Must(t, err)
		if r.Records != 2 {
			t.Errorf("%s: without RefuseHardLinks: %s", m.name, r.Out)
		}
	}
}

// TestMounts: a mount inside the tree (a tmpfs, and a bind mount of the
// same file system, which only the mount id tells apart) is listed but
// not entered unless CrossMounts.
func TestMounts(t *testing.T) {
	testutil.RequireRoot(t)
	base, root := fixture(t, false)
	tmp, bind := filepath.Join(root, "tmpfs"), filepath.Join(root, "bind")
	testutil.Must(t, os.Mkdir(tmp, 0o755))
	testutil.Must(t, os.Mkdir(bind, 0o755))
	testutil.Must(t, unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { unix.Unmount(tmp, unix.MNT_DETACH) })
	testutil.Must(t, os.WriteFile(filepath.Join(tmp, "in-tmpfs.go"), []byte(needle+"\n"), 0o644))
	testutil.Must(t, unix.Mount(filepath.Join(base, "outside"), bind, "", unix.MS_BIND, ""))
	t.Cleanup(func() { unix.Unmount(bind, unix.MNT_DETACH) })
	for _, m := range modes {
		for _, cross := range []bool{false, true} {
			r, err := Search(context.Background(), openDir(t, root, "."), Query{Content: mustRE(needle)}, opts(m, Options{CrossMounts: cross}))
			testutil.Must(t, err)
			out := string(r.Out)
			found := strings.Contains(out, "tmpfs/in-tmpfs.go") && strings.Contains(out, "bind/secret.txt")
			if found != cross || strings.Contains(out, "bind/") != cross {
				t.Errorf("%s cross=%v: %s", m.name, cross, out)
			}
			if wantMounts := int64(2); !cross && r.Stats.Mounts != wantMounts {
				t.Errorf("%s: stats %+v", m.name, r.Stats)
			}
		}
	}
}

func TestCancel(t *testing.T) {
	_, root := fixture(t, false)
	for _, m := range modes {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r, err := Search(ctx, openDir(t, root, "."), Query{Content: mustRE(needle)}, opts(m, Options{}))
		if !errors.Is(err, context.Canceled) || !r.Truncated || r.Records != 0 || !reflect.DeepEqual(r.Limits, []string{LimitCanceled}) {
			t.Errorf("%s: canceled before: %v %+v", m.name, err, r)
		}
		// Canceled during the walk, by the name matcher at its third name.
		ctx, cancel = context.WithCancel(context.Background())
		calls := 0
		r, err = Search(ctx, openDir(t, root, "."), Query{Name: func(string) bool {
			if calls++; calls == 3 {
				cancel()
			}
			return true
		}}, opts(m, Options{}))
		if !errors.Is(err, context.Canceled) || r.Records != 3 || !r.Truncated {
			t.Errorf("%s: canceled during: %v %d records", m.name, err, r.Records)
		}
		cancel()
	}
}

func TestRefusals(t *testing.T) {
	_, root := fixture(t, false)
	dir := openDir(t, root, ".")
	if _, err := Search(context.Background(), dir, Query{Name: mustGlob("*")}, Options{}); !errors.Is(err, ErrNoSkip) {
		t.Errorf("no skip: %v", err)
	}
	if _, err := Tree(context.Background(), dir, 1, false, Options{}); !errors.Is(err, ErrNoSkip) {
		t.Errorf("no skip: %v", err)
	}
	if _, err := Search(context.Background(), dir, Query{}, Options{Skip: SkipNone}); !errors.Is(err, ErrNoQuery) {
		t.Errorf("no query: %v", err)
	}
	if _, err := Glob("[x"); err == nil {
		t.Error("bad glob accepted")
	}
	if _, err := Search(context.Background(), openDir(t, root, "a.go"), Query{Name: mustGlob("*")}, Options{Skip: SkipNone}); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("a file as the start: %v", err)
	}
}

// TestDeterministic: on a tree of a few hundred files the result is the
// same with one worker as with eight, at every cap.
func TestDeterministic(t *testing.T) {
	root := t.TempDir()
	for i := range 300 {
		p := filepath.Join(root, fmt.Sprintf("d%d/e%d", i%7, i%5), fmt.Sprintf("f%03d.txt", i))
		testutil.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		testutil.Must(t, os.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("line %d NEEDLE\nfiller\n", i), i%4+1)), 0o644))
	}
	for _, o := range []Options{{}, {MaxResults: 37}, {MaxBytes: 5000}, {MaxEntries: 100}, {MaxDepth: 2}, {MaxFileBytes: 20}} {
		var first *Result
		for _, workers := range []int{1, 2, 8} {
			o.Workers = workers
			r, err := Search(context.Background(), openDir(t, root, "."), Query{Content: mustRE(needle)}, opts(modes[0], o))
			testutil.Must(t, err)
			if first == nil {
				first = r
			} else if !reflect.DeepEqual(r, first) {
				t.Errorf("%+v: %d workers gave another result: %d records %q, then %d records %q", o, workers, first.Records, first.Limits, r.Records, r.Limits)
			}
		}
	}
}

func TestMaxScan(t *testing.T) {
	_, root := fixture(t, false)
	r, err := Search(context.Background(), openDir(t, root, "."), Query{Name: mustGlob("*")}, opts(modes[0], Options{MaxScan: 5}))
	testutil.Must(t, err)
	if !r.Truncated || !reflect.DeepEqual(r.Limits, []string{LimitScan}) || r.Records != 0 {
		t.Errorf("%+v", r)
	}
}

// TestCancelContent: a content search canceled mid-walk returns the
// error and a result marked canceled.
func TestCancelContent(t *testing.T) {
	_, root := fixture(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	r, err := Search(ctx, openDir(t, root, "."), Query{Name: func(string) bool {
		if calls++; calls == 2 {
			cancel()
		}
		return true
	}, Content: mustRE(needle)}, opts(modes[0], Options{}))
	if !errors.Is(err, context.Canceled) || !r.Truncated || !slices.Contains(r.Limits, LimitCanceled) {
		t.Errorf("%v %+v", err, r)
	}
}
