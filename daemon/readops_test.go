//go:build linux

package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// The read-only operations over the socket: read's ranges, list's depth
// and sizes, stat and search, each with its table of allowed cases,
// errors and escapes.

// escapeManifest is the escape fixture's manifest with a stat and a
// search tool of the same roots and never globs.
func escapeManifest(t *testing.T, fx *escapetest.Fixture) string {
	t.Helper()
	var m map[string]any
	testutil.Must(t, json.Unmarshal([]byte(escapetest.ManifestJSON), &m))
	tools := m["tools"].(map[string]any)
	for name, op := range map[string]string{"stat_path": "stat", "search_files": "search"} {
		tools[name] = map[string]any{"operation": op, "roots": []string{"workspace/src", "workspace/tests"},
			"never": []string{".env", "*.pem", "private/**"}, "max_bytes": escapetest.MaxBytes}
	}
	b, _ := json.Marshal(m)
	p := filepath.Join(fx.Base, "manifest-readops.json")
	testutil.Must(t, os.WriteFile(p, b, 0o644))
	return p
}

// TestStatSearchEscapeTable runs the one escape table's paths as stat and
// search calls: every escape and never-listed case is refused as it is
// for a read; what differs is only which kinds each describes (stat: any
// kind the kernel resolved; search: a directory or a regular file).
func TestStatSearchEscapeTable(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range []securefs.Mode{securefs.ModeOpenat2, securefs.ModeFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			fx := escapetest.Build(t)
			h := start(t, escapeManifest(t, fx), mode)
			for _, c := range escapetest.Cases {
				for _, op := range []string{"stat", "search"} {
					want := c.Want
					switch {
					case c.Want == "not_a_file" || c.Want == "not_a_directory" && c.Name == "list a file":
						want = "allowed"
					case op == "stat" && (c.Want == "not_a_directory" || c.Want == "unsupported_file_type" && !strings.Contains(c.Name, "hard link")):
						want = "allowed" // a FIFO, socket or device is described, never opened
					case op == "search" && c.Want == "not_a_directory":
						want = "unsupported_file_type"
					}
					args := map[string]any{"path": fx.PathFor(c)}
					tool := "stat_path"
					if op == "search" {
						tool, args["content"] = "search_files", "."
					}
					res, body := h.call(tool, args)
					if bytes.Contains(body, []byte(escapetest.Secret)) {
						t.Errorf("%s %s: ESCAPE: %s", op, c.Name, body)
					}
					if string(res.Reason) != string(want) {
						t.Errorf("%s %s: %s, want %s (%s)", op, c.Name, res.Reason, want, body)
						continue
					}
					if err := fx.CheckResolved(c, res.Resource); err != nil && want == "allowed" {
						t.Errorf("%s %s: %v", op, c.Name, err)
					}
				}
			}
			// A search of the whole tree by name and by content returns no
			// never-listed name and no byte of a never-listed file.
			for _, args := range []map[string]any{
				{"path": "workspace/src", "name": "*"},
				{"path": "workspace/src", "content": "SLUICE"},
				{"path": "workspace/src", "content": "."},
				{"path": "workspace/src", "name": "**/*", "content": "."},
			} {
				res, body := h.call("search_files", args)
				if !res.OK || bytes.Contains(body, []byte(escapetest.Secret)) {
					t.Errorf("search %v: %s", args, body)
				}
				for _, hidden := range []string{`.env`, `id.pem`, `private`, `innocent.txt"`, `"secret.txt`} {
					if bytes.Contains(body, []byte(hidden)) {
						t.Errorf("search %v: shows never-listed %s: %s", args, hidden, body)
					}
				}
			}
			if l := h.ledger(); bytes.Contains(l, []byte(escapetest.Secret)) {
				t.Fatal("a secret reached the audit ledger")
			}
		})
	}
}

// readOpsFixture is a workspace for the read-only operations' tables.
func readOpsFixture(t *testing.T, maxBytes int) (*harness, string) {
	t.Helper()
	base := t.TempDir()
	file := func(p, s string) {
		t.Helper()
		testutil.Must(t, os.MkdirAll(filepath.Dir(filepath.Join(base, p)), 0o755))
		testutil.Must(t, os.WriteFile(filepath.Join(base, p), []byte(s), 0o644))
	}
	var lines strings.Builder
	for i := 1; i <= 100; i++ {
		lines.WriteString("line " + itoa(i) + "\n")
	}
	file("ws/lines.txt", lines.String())
	file("ws/nonl.txt", "one\ntwo")
	file("ws/empty.txt", "")
	file("ws/long.txt", strings.Repeat("x", 300)+"\nshort\n")
	file("ws/a/b.txt", "bbbb")
	file("ws/a/.env", "NEEDLE-42 in a never-listed file at depth 2\n")
	file("ws/a/secrets/k.txt", "NEEDLE-42 in a never-listed dir\n")
	file("ws/a/c/d.txt", "NEEDLE-42 visible\n")
	file("ws/a/c/e/f.txt", "deep")
	file("ws/NEEDLE-42.pem", "NEEDLE-42 by name")
	file("ws/private/NEEDLE-42.txt", "NEEDLE-42")
	file("ws/bin.dat", "NEEDLE-42\x00\x01")
	file("outside/NEEDLE-42.txt", "NEEDLE-42 outside")
	testutil.Must(t, os.Symlink("../outside", filepath.Join(base, "ws/out")))
	testutil.Must(t, os.Symlink("a/.env", filepath.Join(base, "ws/envlink")))
	testutil.Must(t, os.Symlink("lines.txt", filepath.Join(base, "ws/lineslink")))
	testutil.Must(t, unix.Mkfifo(filepath.Join(base, "ws/fifo"), 0o600))
	f, err := os.Create(filepath.Join(base, "ws/big"))
	testutil.Must(t, err)
	testutil.Must(t, f.Truncate(65<<20))
	testutil.Must(t, f.Close())
	tool := func(op string) string {
		return `{"operation":"` + op + `","roots":["ws"],"never":[".env","*.pem","private/**","secrets"],"max_bytes":` + itoa(maxBytes) + `}`
	}
	m := writeManifest(t, base, `{"schema_version":1,"tools":{"read":`+tool("read")+`,"list":`+tool("list")+
		`,"stat":`+tool("stat")+`,"search":`+tool("search")+`}}`)
	return start(t, m, securefs.ModeOpenat2), base
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestReadRanges(t *testing.T) {
	h, _ := readOpsFixture(t, 4096)
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name   string
		args   map[string]any
		reason api.Reason
		out    string
		size   int64
		next   *int64
		trunc  bool
	}{
		{"whole", map[string]any{"path": "ws/nonl.txt"}, "allowed", "one\ntwo", 7, nil, false},
		{"empty", map[string]any{"path": "ws/empty.txt"}, "allowed", "", 0, nil, false},
		{"offset limit", map[string]any{"path": "ws/lines.txt", "offset": 3, "limit": 2}, "allowed", "line 3\nline 4\n", 792, i64(5), true},
		{"offset to end", map[string]any{"path": "ws/lines.txt", "offset": 99}, "allowed", "line 99\nline 100\n", 792, nil, false},
		{"limit to end exactly", map[string]any{"path": "ws/lines.txt", "offset": 99, "limit": 2}, "allowed", "line 99\nline 100\n", 792, nil, false},
		{"offset past end", map[string]any{"path": "ws/lines.txt", "offset": 1000}, "allowed", "", 792, nil, false},
		{"last line without newline", map[string]any{"path": "ws/nonl.txt", "offset": 2}, "allowed", "two", 7, nil, false},
		{"tail", map[string]any{"path": "ws/lines.txt", "tail": 2}, "allowed", "line 99\nline 100\n", 792, nil, false},
		{"tail longer than file", map[string]any{"path": "ws/nonl.txt", "tail": 10}, "allowed", "one\ntwo", 7, nil, false},
		{"through a symlink", map[string]any{"path": "ws/lineslink", "limit": 1}, "allowed", "line 1\n", 792, i64(2), true},
		{"tail with offset", map[string]any{"path": "ws/lines.txt", "tail": 2, "offset": 1}, "invalid_args", "", 0, nil, false},
		{"zero limit", map[string]any{"path": "ws/lines.txt", "limit": 0}, "invalid_args", "", 0, nil, false},
		{"negative offset", map[string]any{"path": "ws/lines.txt", "offset": -1}, "invalid_args", "", 0, nil, false},
		{"range of a never-listed file", map[string]any{"path": "ws/a/.env", "tail": 1}, "never_listed", "", 0, nil, false},
		{"range through a symlink out", map[string]any{"path": "ws/out/NEEDLE-42.txt", "limit": 1}, "outside_roots", "", 0, nil, false},
		{"range of a fifo", map[string]any{"path": "ws/fifo", "limit": 1}, "unsupported_file_type", "", 0, nil, false},
	} {
		res, body := h.call("read", tc.args)
		if res.Reason != tc.reason {
			t.Errorf("%s: %s, want %s (%s)", tc.name, res.Reason, tc.reason, body)
			continue
		}
		if tc.reason != "allowed" {
			if res.Size != nil || res.Output != nil || bytes.Contains(body, []byte("NEEDLE")) {
				t.Errorf("%s: a denial carries a size or output: %s", tc.name, body)
			}
			continue
		}
		if res.Output == nil && tc.out != "" || res.Output != nil && *res.Output != tc.out {
			t.Errorf("%s: output %q, want %q", tc.name, derefStr(res.Output), tc.out)
		}
		if res.Size == nil || *res.Size != tc.size {
			t.Errorf("%s: size %v, want %d (%s)", tc.name, res.Size, tc.size, body)
		}
		if (res.NextOffset == nil) != (tc.next == nil) || tc.next != nil && *res.NextOffset != *tc.next {
			t.Errorf("%s: next_offset %v, want %v (%s)", tc.name, res.NextOffset, tc.next, body)
		}
		if res.Truncated != tc.trunc {
			t.Errorf("%s: truncated %t", tc.name, res.Truncated)
		}
	}
}

// TestReadMaxBytesNextOffset: a read that max_bytes cut says where to go
// on, ranged (at a whole line) or not (the line the cut fell in again),
// and a caller that follows next_offset reads the whole file.
func TestReadMaxBytesNextOffset(t *testing.T) {
	h, base := readOpsFixture(t, 20)
	res, body := h.call("read", map[string]any{"path": "ws/lines.txt"})
	if !res.OK || !res.Truncated || res.Bytes != 20 || res.NextOffset == nil || *res.NextOffset != 3 || *res.Size != 792 {
		t.Fatalf("plain read cut by max_bytes: %s", body)
	}
	var got strings.Builder
	next := int64(1)
	for calls := 0; ; calls++ {
		if calls > 100 {
			t.Fatal("next_offset does not advance")
		}
		res, body := h.call("read", map[string]any{"path": "ws/lines.txt", "offset": next})
		if !res.OK || res.Bytes > 20 {
			t.Fatalf("offset %d: %s", next, body)
		}
		got.WriteString(derefStr(res.Output))
		if res.NextOffset == nil {
			break
		}
		next = *res.NextOffset
	}
	want, _ := os.ReadFile(filepath.Join(base, "ws/lines.txt"))
	if got.String() != string(want) {
		t.Fatalf("following next_offset read %q", got.String())
	}
	// One line longer than max_bytes: cut, and skipped by next_offset.
	res, body = h.call("read", map[string]any{"path": "ws/long.txt", "limit": 5})
	if !res.OK || res.Bytes != 20 || res.NextOffset == nil || *res.NextOffset != 2 {
		t.Fatalf("a long line: %s", body)
	}
	res, body = h.call("read", map[string]any{"path": "ws/long.txt"})
	if !res.OK || res.NextOffset == nil || *res.NextOffset != 2 {
		t.Fatalf("a long first line, plain read: %s", body)
	}
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestListDepth: a tree to depth, never-listed entries absent at every
// level (a .env and a private/ at depth 2), symlinks not descended, and
// sizes that count only what a listing shows.
func TestListDepth(t *testing.T) {
	h, _ := readOpsFixture(t, 65536)
	res, body := h.call("list", map[string]any{"path": "ws", "depth": 3, "sizes": true})
	if !res.OK {
		t.Fatalf("%s", body)
	}
	for _, hidden := range []string{".env", "private", "secrets", ".pem", "NEEDLE-42.txt"} {
		if strings.Contains(*res.Output, hidden) {
			t.Errorf("the tree shows never-listed %s: %s", hidden, *res.Output)
		}
	}
	entries := map[string]api.Entry{}
	for _, line := range strings.Split(strings.TrimSpace(*res.Output), "\n") {
		var e api.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		entries[e.Name] = e
	}
	a := entries["a"]
	if a.Type != "dir" || len(a.Children) != 2 || a.Children[0].Name != "b.txt" || a.Children[1].Name != "c" {
		t.Fatalf("depth 2: %+v", a)
	}
	c := a.Children[1]
	if len(c.Children) != 2 || c.Children[0].Name != "d.txt" || c.Children[1].Name != "e" || c.Children[1].Children != nil {
		t.Fatalf("depth 3 stops there: %+v", c)
	}
	// b.txt 4 + d.txt 18 + e/f.txt 4 (below depth, counted): never the
	// hidden .env and private/k.txt.
	if a.Size != 26 || c.Size != 22 || c.Children[1].Size != 4 {
		t.Errorf("sizes: a %d c %d e %d", a.Size, c.Size, c.Children[1].Size)
	}
	if out := entries["out"]; out.Type != "symlink" || out.Children != nil {
		t.Errorf("a symlink out is listed, never descended: %+v", out)
	}
	// Without sizes a directory has none; depth 1 has no children.
	res, _ = h.call("list", map[string]any{"path": "ws"})
	if strings.Contains(*res.Output, "children") || !strings.Contains(*res.Output, `{"name":"a","type":"dir","size":0}`) {
		t.Errorf("depth 1: %s", *res.Output)
	}
	for _, tc := range []struct {
		args map[string]any
		want api.Reason
	}{
		{map[string]any{"path": "ws", "depth": 0}, "invalid_args"},
		{map[string]any{"path": "ws", "depth": 17}, "invalid_args"},
		{map[string]any{"path": "ws/a/secrets", "depth": 2}, "never_listed"},
		{map[string]any{"path": "ws/private", "depth": 2}, "never_listed"},
		{map[string]any{"path": "ws/out", "depth": 2}, "outside_roots"},
		{map[string]any{"path": "ws/../ws", "depth": 2}, "outside_roots"},
	} {
		if res, body := h.call("list", tc.args); res.Reason != tc.want || bytes.Contains(body, []byte("NEEDLE")) {
			t.Errorf("list %v: %s", tc.args, body)
		}
	}
}

// TestListDepthTruncated: a tree that max_bytes cannot hold is cut at a
// whole line and says so.
func TestListDepthTruncated(t *testing.T) {
	h, _ := readOpsFixture(t, 120)
	res, body := h.call("list", map[string]any{"path": "ws", "depth": 4})
	if !res.OK || !res.Truncated || res.Bytes > 120 {
		t.Fatalf("%s", body)
	}
	for _, line := range strings.Split(strings.TrimSpace(derefStr(res.Output)), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Fatalf("a cut line: %q", line)
		}
	}
}

func TestStat(t *testing.T) {
	h, base := readOpsFixture(t, 65536)
	sum := sha256.Sum256([]byte("bbbb"))
	fi, err := os.Stat(filepath.Join(base, "ws/a/b.txt"))
	testutil.Must(t, err)
	for _, tc := range []struct {
		path string
		want api.Reason
		typ  api.Kind
		size int64
		sha  string
	}{
		{"ws/a/b.txt", "allowed", api.KindFile, 4, "sha256:" + hex.EncodeToString(sum[:])},
		{"ws/a", "allowed", api.KindDir, -1, ""},
		{"ws/fifo", "allowed", api.KindFIFO, 0, ""},
		{"ws/lineslink", "allowed", api.KindFile, 792, "sha256:"},
		{"ws/big", "allowed", api.KindFile, 65 << 20, ""}, // over 64 MiB: no digest
		{"ws/empty.txt", "allowed", api.KindFile, 0, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"ws/a/.env", "never_listed", "", 0, ""},
		{"ws/envlink", "never_listed", "", 0, ""},
		{"ws/a/secrets", "never_listed", "", 0, ""},
		{"ws/private", "never_listed", "", 0, ""},
		{"ws/out", "outside_roots", "", 0, ""},
		{"ws/out/NEEDLE-42.txt", "outside_roots", "", 0, ""},
		{"ws/../outside/NEEDLE-42.txt", "outside_roots", "", 0, ""},
		{"outside", "outside_roots", "", 0, ""},
		{base + "/ws/a/b.txt", "invalid_path", "", 0, ""},
		{"ws/missing", "not_found", "", 0, ""},
	} {
		res, body := h.call("stat", map[string]any{"path": tc.path})
		if res.Reason != tc.want {
			t.Errorf("%s: %s, want %s (%s)", tc.path, res.Reason, tc.want, body)
			continue
		}
		if tc.want != "allowed" {
			if res.Output != nil {
				t.Errorf("%s: a denial carries output", tc.path)
			}
			continue
		}
		var st api.Stat
		if err := json.Unmarshal([]byte(derefStr(res.Output)), &st); err != nil {
			t.Fatalf("%s: %s: %v", tc.path, body, err)
		}
		if st.Type != tc.typ || tc.size >= 0 && st.Size != tc.size || !strings.HasPrefix(st.SHA256, tc.sha) || (tc.sha == "") != (st.SHA256 == "") {
			t.Errorf("%s: %+v", tc.path, st)
		}
		if tc.path == "ws/a/b.txt" && (st.Mode != "0644" || st.MTime != fi.ModTime().UTC().Format("2006-01-02T15:04:05.999999999Z07:00")) {
			t.Errorf("%s: mode %s mtime %s, want 0644 %s", tc.path, st.Mode, st.MTime, fi.ModTime().UTC())
		}
	}
}

// TestSearch: by name, by content and both; never-listed names and bytes
// (a needle in a never-listed file, a never-listed dir, a never-listed
// name, behind a symlink out) are never returned.
func TestSearch(t *testing.T) {
	h, _ := readOpsFixture(t, 65536)
	type m = api.SearchMatch
	for _, tc := range []struct {
		name  string
		args  map[string]any
		want  api.Reason
		match []m
		trunc bool
	}{
		{"content", map[string]any{"path": "ws", "content": "NEEDLE-4[0-9]"}, "allowed", []m{{Path: "a/c/d.txt", Line: 1, Text: "NEEDLE-42 visible"}}, false},
		{"name", map[string]any{"path": "ws", "name": "*NEEDLE*"}, "allowed", []m{}, false},
		{"name txt", map[string]any{"path": "ws/a", "name": "*.txt"}, "allowed", []m{{Path: "b.txt"}, {Path: "c/d.txt"}, {Path: "c/e/f.txt"}}, false},
		{"name with dirs", map[string]any{"path": "ws", "name": "a/**/f.txt"}, "allowed", []m{{Path: "a/c/e/f.txt"}}, false},
		{"name and content", map[string]any{"path": "ws", "name": "*.txt", "content": "^line 10[0-9]$"}, "allowed", []m{{Path: "lines.txt", Line: 100, Text: "line 100"}}, false},
		{"one file", map[string]any{"path": "ws/lines.txt", "content": "^line 5$"}, "allowed", []m{{Path: "lines.txt", Line: 5, Text: "line 5"}}, false},
		{"max results", map[string]any{"path": "ws", "content": "^line", "max_results": 2}, "allowed", []m{{Path: "lines.txt", Line: 1, Text: "line 1"}, {Path: "lines.txt", Line: 2, Text: "line 2"}}, true},
		{"never-listed dir", map[string]any{"path": "ws/a/secrets", "content": "NEEDLE"}, "never_listed", nil, false},
		{"never-listed dir glob", map[string]any{"path": "ws/private", "name": "*"}, "never_listed", nil, false},
		{"everything", map[string]any{"path": "ws", "name": "**", "content": "NEEDLE|line 1$"}, "allowed", []m{{Path: "a/c/d.txt", Line: 1, Text: "NEEDLE-42 visible"}, {Path: "lines.txt", Line: 1, Text: "line 1"}}, false},
		{"never-listed file", map[string]any{"path": "ws/a/.env", "content": "NEEDLE"}, "never_listed", nil, false},
		{"symlink to never-listed", map[string]any{"path": "ws/envlink", "content": "NEEDLE"}, "never_listed", nil, false},
		{"symlink out", map[string]any{"path": "ws/out", "content": "NEEDLE"}, "outside_roots", nil, false},
		{"dotdot", map[string]any{"path": "ws/..", "content": "NEEDLE"}, "outside_roots", nil, false},
		{"absolute", map[string]any{"path": "/etc", "content": "root"}, "invalid_path", nil, false},
		{"fifo", map[string]any{"path": "ws/fifo", "content": "x"}, "unsupported_file_type", nil, false},
		{"neither", map[string]any{"path": "ws"}, "invalid_args", nil, false},
		{"bad regex", map[string]any{"path": "ws", "content": "a(?=b)"}, "invalid_args", nil, false},
		{"bad glob", map[string]any{"path": "ws", "name": "[x"}, "invalid_args", nil, false},
	} {
		res, body := h.call("search", tc.args)
		if res.Reason != tc.want {
			t.Errorf("%s: %s, want %s (%s)", tc.name, res.Reason, tc.want, body)
			continue
		}
		for _, leak := range []string{"never-listed", "NEEDLE-42 outside", ".env", "private", "secrets", ".pem", "bin.dat"} {
			if strings.Contains(derefStr(res.Output), leak) {
				t.Errorf("%s: LEAK of %q: %s", tc.name, leak, body)
			}
		}
		if tc.want != "allowed" {
			continue
		}
		var got api.SearchResults
		if err := json.Unmarshal([]byte(derefStr(res.Output)), &got); err != nil {
			t.Fatalf("%s: %s", tc.name, body)
		}
		if got.Matches == nil {
			got.Matches = []m{}
		}
		gb, _ := json.Marshal(got.Matches)
		wb, _ := json.Marshal(tc.match)
		if !bytes.Equal(gb, wb) || got.Truncated != tc.trunc || res.Truncated != tc.trunc {
			t.Errorf("%s: %s truncated %t, want %s %t", tc.name, gb, got.Truncated, wb, tc.trunc)
		}
	}
	// max_bytes caps the document, which says it was cut.
	h2, _ := readOpsFixture(t, 200)
	res, body := h2.call("search", map[string]any{"path": "ws", "content": "^line"})
	var got api.SearchResults
	if !res.OK || res.Bytes > 200 || json.Unmarshal([]byte(derefStr(res.Output)), &got) != nil || !got.Truncated || len(got.Matches) == 0 {
		t.Fatalf("max_bytes: %s", body)
	}
}
