package fileop

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// The crash helper: the test binary re-executed with crashHelperEnv set
// to a root directory overwrites the file "f" there in a loop, with
// contents A and B in turn, reporting on fd 3 each write it starts
// ("write I"), each temporary name before it is created ("tmp I NAME")
// and after it is gone ("done I NAME"). The parent kills it with SIGKILL
// on a chosen message.
const (
	crashHelperEnv    = "SLUICE_FILEOP_CRASH_HELPER"
	crashNoTmpfileEnv = "SLUICE_FILEOP_CRASH_NOTMPFILE"
	crashFile         = "f"
)

// Two contents of different lengths, so that a torn or truncated file
// matches neither.
var crashContents = [2][]byte{
	bytes.Repeat([]byte("A"), 3<<20),
	bytes.Repeat([]byte("B"), 5<<20+17),
}

func crashHelper(dir string) int {
	msgs := os.NewFile(3, "msgs")
	say := func(format string, args ...any) {
		if _, err := fmt.Fprintf(msgs, format+"\n", args...); err != nil {
			os.Exit(3) // the parent is gone
		}
	}
	root, err := securefs.OpenRoot(dir, securefs.ModeOpenat2)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := 0; i < 10000; i++ {
		p, err := ResolveParent(root, crashFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		say("write %d", i)
		_, err = Write(p, crashContents[i%2], WriteOptions{
			Mode:       Overwrite,
			noTmpfile:  os.Getenv(crashNoTmpfileEnv) != "",
			OnTemp:     func(_ *Parent, n string) error { say("tmp %d %s", i, n); return nil },
			OnTempDone: func(_ *Parent, n string) { say("done %d %s", i, n) },
		})
		p.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 4 // never killed
}

// TestKillMidWrite: a writer killed with SIGKILL at various points leaves
// the file holding exactly the old or the new content, and no temporary
// name that its journal hook did not report; RemoveTemp sweeps those.
func TestKillMidWrite(t *testing.T) {
	cases := []struct {
		name      string
		noTmpfile bool
		killOn    string // prefix of the message the parent kills on
	}{
		{"tmpfile/while writing", false, "write 3"},
		{"tmpfile/at temp name", false, "tmp 4 "},
		{"tmpfile/after a commit", false, "done 2 "},
		{"named/while writing", true, "write 3"},
		{"named/at temp name", true, "tmp 4 "},
		{"named/after a commit", true, "done 2 "},
	}
	leftovers := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, securefs.ModeOpenat2)
			target := filepath.Join(f.dir, crashFile)
			if err := os.WriteFile(target, crashContents[1], 0o644); err != nil {
				t.Fatal(err)
			}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashHelperEnv+"="+f.dir)
			if c.noTmpfile {
				cmd.Env = append(cmd.Env, crashNoTmpfileEnv+"=1")
			}
			cmd.ExtraFiles = []*os.File{w}
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				w.Close()
				t.Fatal(err)
			}
			w.Close()

			reported := map[string]bool{}
			sc := bufio.NewScanner(r)
			note := func(line string) {
				if fs := strings.Fields(line); len(fs) == 3 && fs[0] == "tmp" {
					reported[fs[2]] = true
				}
			}
			killed := false
			for sc.Scan() {
				note(sc.Text())
				if strings.HasPrefix(sc.Text(), c.killOn) {
					cmd.Process.Kill()
					killed = true
					break
				}
			}
			if !killed {
				cmd.Wait()
				t.Fatalf("helper ended before %q: %v", c.killOn, sc.Err())
			}
			cmd.Wait()
			var after []string
			for sc.Scan() { // what it said between the message and the kill
				note(sc.Text())
				after = append(after, sc.Text())
			}
			t.Logf("killed on %q; said after it: %q", c.killOn, after)

			got, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, crashContents[0]) && !bytes.Equal(got, crashContents[1]) {
				t.Fatalf("torn file: %d bytes, starting %q", len(got), got[:min(len(got), 16)])
			}
			p := f.parent(t, crashFile)
			for _, n := range testutil.Listing(t, f.dir) {
				switch {
				case n == crashFile || n == "sub":
				case strings.HasPrefix(n, TempPrefix) && reported[n]:
					leftovers++
					if err := RemoveTemp(p, n); err != nil {
						t.Fatalf("sweep %s: %v", n, err)
					}
				default:
					t.Fatalf("left behind and never reported: %s", n)
				}
			}
			if names := testutil.Listing(t, f.dir); strings.Join(names, ",") != crashFile+",sub" {
				t.Fatalf("after the sweep: %v", names)
			}
		})
	}
	t.Logf("%d journaled temporary names swept", leftovers)
}
