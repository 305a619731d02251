//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/sandbox"
)

type probeTool struct {
	name   string
	argv   []string
	extra  string // more manifest keys
	reason api.Reason
	want   string // in stdout+stderr
	ok     *bool
}

// execFixture builds the escape fixture plus the probe binary inside the
// mounted workspace, and a manifest with one tool per probe.
func execFixture(t *testing.T, tools []probeTool) (*escapetest.Fixture, string) {
	t.Helper()
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	bin, err := os.ReadFile(testutil.Probe(t))
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(filepath.Join(fx.Base, "workspace/tests/probe"), bin, 0o755))
	var b strings.Builder
	b.WriteString(`{"schema_version":1,"tools":{"read_file":{"operation":"read","roots":["workspace/src"]}`)
	for _, tl := range tools {
		argv, _ := json.Marshal(tl.argv)
		fmt.Fprintf(&b, `,"%s":{"operation":"execute","commands":[%s],"mounts":["workspace/src","workspace/tests"],"cwd":"workspace/tests","pool":0,"never":[".env","*.pem","private/**"]%s}`,
			tl.name, argv, tl.extra)
	}
	b.WriteString(`}}`)
	return fx, writeManifest(t, fx.Base, b.String())
}

func exitOK(v bool) *bool { return &v }

// checkStatusIDs: a /proc/self/status from inside shows one uid, from
// rng and not nobody's, in all four Uid fields, and the same in Gid.
func checkStatusIDs(t *testing.T, status string, rng sandbox.IDRange) {
	t.Helper()
	var uid, gid string
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid = strings.Join(strings.Fields(v), " ")
		}
		if v, ok := strings.CutPrefix(line, "Gid:"); ok {
			gid = strings.Join(strings.Fields(v), " ")
		}
	}
	var id uint32
	if n, _ := fmt.Sscan(uid, &id); n != 1 || id < rng.First || id > rng.Last || id == 65534 {
		t.Errorf("uid %q inside: want one id of %s", uid, rng)
	}
	if want := strings.Repeat(fmt.Sprint(id)+" ", 4); uid+" " != want || gid+" " != want {
		t.Errorf("Uid %q Gid %q inside: want %q in each", uid, gid, strings.TrimSpace(want))
	}
}

// TestExecuteProbes: the corpus's Execute cases and more, each a fixed
// command in the manifest, run over the socket.
func TestExecuteProbes(t *testing.T) {
	port, accepted := testutil.Listener(t)
	probe := "./probe"
	tools := []probeTool{
		{name: "egress", argv: []string{probe, "connect", port}, reason: "allowed", want: "blocked:connect"},
		{name: "host_secret", argv: []string{probe, "read", "SECRET_PATH"}, reason: "allowed", want: "blocked:read"},
		{name: "dotenv", argv: []string{probe, "read", "ENV_PATH"}, reason: "allowed", want: "blocked:read:2:"}, // absent from the view
		{name: "pem_and_private", argv: []string{"sh", "-c", "cat ../src/id.pem ../src/sub/.env; ls -A ../src/private; cat ../src/keys_link; echo done"},
			reason: "allowed", want: "done"},
		{name: "write_mount", argv: []string{probe, "write", "../src/new.py"}, reason: "allowed", want: "blocked:write:30:"},
		{name: "unshare", argv: []string{probe, "unshare-user"}, reason: "allowed", want: "blocked"},
		{name: "mount", argv: []string{probe, "mount"}, reason: "allowed", want: "blocked"},
		{name: "ptrace", argv: []string{probe, "ptrace"}, reason: "allowed", want: "blocked"},
		{name: "bpf", argv: []string{probe, "bpf"}, reason: "allowed", want: "blocked"},
		{name: "keyctl", argv: []string{probe, "keyctl"}, reason: "allowed", want: "blocked"},
		{name: "perf", argv: []string{probe, "perf_event_open"}, reason: "allowed", want: "blocked"},
		{name: "io_uring", argv: []string{probe, "io_uring_setup"}, reason: "allowed", want: "blocked"},
		{name: "tiocsti", argv: []string{probe, "tiocsti-highbits"}, reason: "allowed", want: "blocked:tiocsti-highbits:13:"},
		{name: "clone_newuser", argv: []string{probe, "clone-newuser"}, reason: "allowed", want: "blocked"},
		{name: "status", argv: []string{probe, "status"}, reason: "allowed", ok: exitOK(true),
			want: "NoNewPrivs:\t1"},
		{name: "fds", argv: []string{probe, "fds"}, reason: "allowed", ok: exitOK(true), want: "FDS:0,1,2,\n"},
		{name: "env", argv: []string{probe, "env"}, extra: `,"env":{"FOO":"bar"}`, reason: "allowed",
			want: "ENV:PATH=" + sandbox.DefaultPath + "\nENV:FOO=bar\nENV:HOME=/tmp\n"},
		{name: "balloon", argv: []string{probe, "balloon", "512"}, extra: `,"memory_mb":32`, reason: "limit_exceeded"},
		{name: "forkbomb", argv: []string{"sh", "-c", "b() { b | b & }; b; sleep 100"}, extra: `,"pids":16,"timeout_ms":3000`, reason: "limit_exceeded"},
		{name: "sleeper", argv: []string{"sleep", "600"}, extra: `,"timeout_ms":1000`, reason: "timeout"},
		{name: "failing", argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, reason: "allowed", ok: exitOK(false), want: "out\nerr\n"},
		{name: "missing_cmd", argv: []string{"no-such-command"}, reason: "allowed", ok: exitOK(false), want: "No such file"},
	}
	fx, m := execFixture(t, tools)
	secret := filepath.Join(fx.Base, "secret.txt")
	env := filepath.Join(fx.Base, "workspace/src/.env")
	raw, err := os.ReadFile(m)
	testutil.Must(t, err)
	raw = bytes.ReplaceAll(raw, []byte("SECRET_PATH"), []byte(secret))
	raw = bytes.ReplaceAll(raw, []byte("ENV_PATH"), []byte(env))
	testutil.Must(t, os.WriteFile(m, raw, 0o644))
	runDir := t.TempDir()
	var logs *bytes.Buffer
	t.Cleanup(func() { // registered first, so it runs after the daemon has stopped
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind after the daemon stopped: %v\n%s", left, logs)
		}
	})
	uids := sandbox.IDRange{First: 0x7F010000, Last: 0x7F0100FF}
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir; c.UIDRange = uids })
	logs = h.logs
	for _, tl := range tools {
		res, body := h.call(tl.name, map[string]any{})
		out := *res.Output + res.Stderr
		if strings.Contains(out, "ESCAPED") || bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Errorf("%s: ESCAPED: %s", tl.name, body)
		}
		if res.Verdict != "allow" || res.Reason != tl.reason {
			t.Errorf("%s: %s/%s, want allow/%s: %s", tl.name, res.Verdict, res.Reason, tl.reason, body)
		}
		if tl.want != "" && !strings.Contains(out, tl.want) {
			t.Errorf("%s: output lacks %q: %q", tl.name, tl.want, out)
		}
		if tl.ok != nil && res.OK != *tl.ok {
			t.Errorf("%s: ok %t", tl.name, res.OK)
		}
		if res.ExitCode == nil {
			t.Errorf("%s: no exit code", tl.name)
		}
		if tl.name == "status" {
			checkStatusIDs(t, out, uids)
		}
		if _, err := h.c.Health(context.Background()); err != nil {
			t.Fatalf("daemon stopped serving after %s: %v", tl.name, err)
		}
	}
	if accepted() != 0 {
		t.Fatal("a sandboxed command reached a listener on the host's 127.0.0.1")
	}
	ledger := h.ledger()
	if !bytes.Contains(ledger, []byte(`"exit_code":3`)) || !bytes.Contains(ledger, []byte(`"reason":"limit_exceeded"`)) ||
		!bytes.Contains(ledger, []byte(`"reason":"timeout"`)) {
		t.Fatal("the ledger lacks exit codes or limit reasons")
	}
}

// TestRelativeDirs: --run-dir and --state-dir given relative to the
// working directory work (libcontainer refused a relative rootfs, so
// every container failed).
func TestRelativeDirs(t *testing.T) {
	_, m := execFixture(t, []probeTool{{name: "two", argv: []string{"echo", "a"}}})
	wd, err := os.Getwd()
	testutil.Must(t, err)
	rel := func(abs string) string {
		r, err := filepath.Rel(wd, abs)
		testutil.Must(t, err)
		return r
	}
	runDir, stateDir := t.TempDir(), t.TempDir()
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir, c.StateDir = rel(runDir), rel(stateDir) })
	h.stateDir = stateDir
	res, _ := h.call("two", map[string]any{})
	if !res.OK || res.Output == nil || *res.Output != "a\n" {
		t.Fatalf("with relative dirs: %+v", res)
	}
	h.ledger() // in the state dir, verified
}

func TestExecuteOutputAndStreaming(t *testing.T) {
	tools := []probeTool{
		{name: "yes", argv: []string{"sh", "-c", "yes | head -c 100000000"}, extra: `,"max_bytes":4096`},
		{name: "slow", argv: []string{"sh", "-c", "echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three"}},
		{name: "two", argv: []string{"echo", "a"}},
	}
	_, m := execFixture(t, tools)
	// a second command for "two", to exercise argv matching
	raw, err := os.ReadFile(m)
	testutil.Must(t, err)
	raw = bytes.Replace(raw, []byte(`"commands":[["echo","a"]]`), []byte(`"commands":[["echo","a"],["echo","b"]]`), 1)
	testutil.Must(t, os.WriteFile(m, raw, 0o644))
	runDir := t.TempDir()
	t.Cleanup(func() {
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })

	res, _ := h.call("yes", map[string]any{})
	if res.Bytes != 4096 || !res.Truncated || len(*res.Output) != 4096 {
		t.Fatalf("yes: bytes %d truncated %t", res.Bytes, res.Truncated)
	}
	// stream: output events arrive while the command runs
	type ev struct {
		kind, stream, data string
		at                 time.Duration
	}
	var events []ev
	begin := time.Now()
	final, err := h.c.Stream(context.Background(), api.CallRequest{Tool: "slow"}, func(e api.Event) error {
		events = append(events, ev{e.Event, e.Stream, e.Data, time.Since(begin)})
		return nil
	})
	if err != nil || !final.OK {
		t.Fatalf("stream: %v %+v", err, final)
	}
	var got []string
	for _, e := range events {
		got = append(got, e.kind+":"+e.stream+":"+strings.TrimSpace(e.data))
	}
	want := "decision:: output:stdout:one output:stderr:two output:stdout:three result::"
	if strings.Join(got, " ") != want {
		t.Fatalf("events %v, want %s", got, want)
	}
	// "one" and "three" are printed a second apart: streamed, they arrive
	// about a second apart too, however long the container took to start.
	if gap := events[3].at - events[1].at; gap < 800*time.Millisecond {
		t.Fatalf("output was not streamed as it came (first and last %v apart): %+v", gap, events)
	}
	// argv must match a command exactly; omitted argv needs a single command
	for _, tc := range []struct {
		args   string
		reason api.Reason
	}{{`{"argv":["echo","b"]}`, "allowed"}, {`{"argv":["echo","c"]}`, "command_not_allowed"},
		{`{"argv":["echo"]}`, "command_not_allowed"}, {`{}`, "invalid_args"}, {`{"argv":"echo a"}`, "400"}} {
		code, body := h.raw(`{"tool":"two","args":` + tc.args + `}`)
		if tc.reason == "400" {
			if code != 400 {
				t.Errorf("%s: %d", tc.args, code)
			}
			continue
		}
		if !bytes.Contains(body, []byte(`"reason":"`+tc.reason+`"`)) {
			t.Errorf("%s: %s", tc.args, body)
		}
	}
	// A client that goes away kills its command: it leaves once the
	// command printed "one"; the container is gone long before the
	// command would have ended, and the ledger has the call's result.
	ctx, cancel := context.WithCancel(context.Background())
	var gone string
	h.c.Stream(ctx, api.CallRequest{Tool: "slow"}, func(e api.Event) error {
		if e.Event == api.EventDecision {
			gone = e.CallID
		}
		if e.Event == api.EventOutput && strings.Contains(e.Data, "one") {
			cancel()
			return errors.New("leaving")
		}
		return nil
	})
	cancel()
	waitFor(t, "the abandoned command's container to go", func() bool { return sandbox.Containers(runDir) == 0 })
	var result []byte
	waitFor(t, "the abandoned call's result record", func() bool {
		for _, line := range bytes.Split(h.ledger(), []byte("\n")) {
			if bytes.Contains(line, []byte(`"kind":"result"`)) && bytes.Contains(line, []byte(gone)) {
				result = line
				return true
			}
		}
		return false
	})
	// Killed, not run to its end: a command that finished would be
	// "allowed" with exit code 0.
	if !bytes.Contains(result, []byte(`"reason":"cancelled"`)) || bytes.Contains(result, []byte(`"exit_code":0`)) {
		t.Fatalf("the abandoned call's result: %s", result)
	}
}

// TestMountSwapDuringPoolRefill: the mount's source was resolved to an fd
// at load; swapping the path for a symlink to a secret while the pool
// refills never puts the secret in a container. The overlap is measured,
// not hoped for: after each call the test waits (on the sluice_pool_ready
// gauge) for the pool to refill, counts the swaps done meanwhile, and
// requires that refills did overlap swaps and that calls took containers
// made during them (sluice_pool_hits_total).
func TestMountSwapDuringPoolRefill(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeManifest(t, fx.Base, `{"schema_version":1,"tools":{"cat":{"operation":"execute",
	  "commands":[["sh","-c","cat `+fx.Base+`/workspace/tests/* 2>&1 | head -c 2000"]],"mounts":["workspace/tests"],"cwd":"/tmp","pool":2}}}`)
	runDir := t.TempDir()
	t.Cleanup(func() {
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	addr := make(chan string, 1)
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.RunDir = runDir
		c.MetricsListen = "127.0.0.1:0"
		c.MetricsListening = func(a string) { addr <- a }
	})
	url := "http://" + <-addr + "/metrics"
	full := func() error {
		if n := metricValue(t, url, `sluice_pool_ready{tool="cat"}`); n != 2 {
			return fmt.Errorf("pool has %v of 2 ready", n)
		}
		return nil
	}
	testutil.Must(t, testutil.Poll(30*time.Second, full))

	tests := filepath.Join(fx.Base, "workspace/tests")
	sw := testutil.Swap(t, func(int) error {
		if err := os.Rename(tests, tests+".orig"); err != nil {
			return err
		}
		if err := os.Symlink(fx.Base, tests); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // the attack's window, not a synchronization
		if err := os.Remove(tests); err != nil {
			return err
		}
		return os.Rename(tests+".orig", tests)
	})
	const calls = 12
	refillsOverlapped, swapsDuringRefill := 0, int64(0)
	for i := 0; i < calls; i++ {
		res, body := h.call("cat", map[string]any{})
		if bytes.Contains(body, []byte(escapetest.Secret)) {
			t.Fatalf("ESCAPE: a refilled container mounted a swapped-in symlink: %s", body)
		}
		if res.Output == nil || !strings.Contains(*res.Output, "import unittest") {
			t.Fatalf("the mount lost its content: %s", body)
		}
		// The call has ended, so its box's refill has begun: wait until
		// it is done, and count the swaps it overlapped.
		before := sw.Swaps()
		if err := testutil.Poll(30*time.Second, full); err != nil {
			t.Fatalf("the pool did not refill after call %d: %v", i, err)
		}
		if n := sw.Swaps() - before; n > 0 {
			refillsOverlapped++
			swapsDuringRefill += n
		}
	}
	if err := sw.Stop(); err != nil {
		t.Fatalf("swap: %v", err)
	}
	hits := metricValue(t, url, `sluice_pool_hits_total{tool="cat"}`)
	t.Logf("%d swaps, %d of %d refills overlapped swaps (%d swaps during refills), %v warm calls",
		sw.Swaps(), refillsOverlapped, calls, swapsDuringRefill, hits)
	if refillsOverlapped == 0 || hits == 0 {
		t.Fatalf("no refill overlapped a swap (%d refills overlapped, %v warm calls): the race was not run", refillsOverlapped, hits)
	}
}

// metricValue scrapes url and returns the sample named series (name and
// labels, as the text format prints them), or fails the test.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	testutil.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testutil.Must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			testutil.Must(t, err)
			return f
		}
	}
	t.Fatalf("%s not in the metrics:\n%s", series, b)
	return 0
}

// TestReloadDrainsPools: a reload destroys the old policy's waiting
// containers and fills pools for the new one; calls work throughout and
// nothing is left once the daemon stops.
func TestReloadDrainsPools(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	manifest := func(word string) string {
		return `{"schema_version":1,"tools":{"say":{"operation":"execute","commands":[["echo","` + word + `"]],"pool":2}}}`
	}
	m := writeManifest(t, fx.Base, manifest("before"))
	runDir := t.TempDir()
	t.Cleanup(func() {
		if left := sandbox.Leftovers(runDir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.RunDir = runDir })
	if res, _ := h.call("say", map[string]any{}); *res.Output != "before\n" {
		t.Fatalf("before reload: %q", *res.Output)
	}
	for i, word := range []string{"after", "again"} {
		writeManifest(t, fx.Base, manifest(word))
		if _, err := h.c.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		if res, _ := h.call("say", map[string]any{}); *res.Output != word+"\n" {
			t.Fatalf("reload %d: %q", i, *res.Output)
		}
	}
	// Only the current policy's pool may remain: at most 2 waiting boxes.
	if err := testutil.Poll(10*time.Second, func() error {
		n := 0
		for _, l := range sandbox.Leftovers(runDir) {
			if strings.HasPrefix(l, "rootfs ") {
				n++
			}
		}
		if n > 2 {
			return fmt.Errorf("%d containers alive after two reloads", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("old pools were not drained: %v", err)
	}
}

// TestLongCallOutlivesWriteTimeout: a command that rightly runs longer
// than the write timeout still gets its result written.
func TestLongCallOutlivesWriteTimeout(t *testing.T) {
	_, m := execFixture(t, []probeTool{{name: "slowish", argv: []string{"sh", "-c", "sleep 2; echo finished"}}})
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.WriteTimeout = time.Second })
	res, _ := h.call("slowish", map[string]any{})
	if !res.OK || *res.Output != "finished\n" {
		t.Fatalf("%+v", res)
	}
}
