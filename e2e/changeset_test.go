//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestChangesetKilledMidCommit: sluiced is SIGKILLed while it commits a
// command's changeset of 2,000 new files (the kill waits on the 500th
// file's IN_CREATE on the host). After a restart a recovered record names
// the call and lists every change, each committed exactly when the host
// has it with its new digest; the commits' temp files are gone and the
// ledger verifies.
func TestChangesetKilledMidCommit(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	testutil.Must(t, os.Chmod(base, 0o755))
	out := filepath.Join(base, "workspace/src/out")
	testutil.Must(t, os.MkdirAll(out, 0o755))
	m := writeFile(t, base, "cs.json", `{"schema_version":1,"tools":{
	  "gen":{"operation":"execute","mounts":["workspace"],"cwd":"workspace/src","pool":0,"timeout_ms":60000,
	    "commands":[["sh","-c",{"any":true}]],
	    "writes":{"roots":["workspace/src"],"commit":"auto"}}}}`)
	const n = 2000
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "file $i" > out/f$i; i=$((i+1)); done`, n)
	for attempt := 0; attempt < 3; attempt++ {
		testutil.Must(t, os.RemoveAll(out))
		testutil.Must(t, os.Mkdir(out, 0o755))
		d := startOwnDaemon(t, m)
		in, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		testutil.Must(t, err)
		_, err = unix.InotifyAddWatch(in, out, unix.IN_CREATE)
		testutil.Must(t, err)
		seen := make(chan struct{})
		go func() {
			buf := make([]byte, 64<<10)
			for {
				k, err := unix.Read(in, buf)
				if err != nil || k <= 0 {
					return
				}
				for off := 0; off+unix.SizeofInotifyEvent <= k; {
					ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
					name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
					off += unix.SizeofInotifyEvent + int(ev.Len)
					if name == "f500" {
						close(seen)
						return
					}
				}
			}
		}()
		args, _ := json.Marshal(map[string]any{"argv": []string{"sh", "-c", script}})
		done := make(chan *api.CallResult, 1)
		go func() {
			res, _ := d.c.Call(context.Background(), api.CallRequest{Tool: "gen", Args: args})
			done <- res
		}()
		select {
		case <-seen:
		case res := <-done:
			t.Fatalf("the call ended before its commit reached f500: %+v", res)
		case <-time.After(120 * time.Second):
			t.Fatal("no f500 on the host within 120 s")
		}
		d.cmd.Process.Kill()
		<-d.exited
		d.cmd = nil
		<-done
		unix.Close(in)
		var callID string
		finished := false
		for _, r := range ledgerRecords(t, d.ledger()) {
			switch {
			case r.Kind == audit.KindChangeset:
				callID = r.CallID
			case r.Kind == audit.KindResult && r.CallID == callID && callID != "":
				finished = true
			}
		}
		if callID == "" {
			t.Fatal("no changeset record before the kill")
		}
		if finished {
			t.Logf("attempt %d: the commit finished before the kill; again", attempt)
			d.stop()
			continue
		}
		d.start()
		d.stop()
		var rec *audit.Record
		for _, r := range ledgerRecords(t, d.ledger()) {
			if r.Kind == audit.KindRecovered && r.CallID == callID {
				r := r
				rec = &r
			}
		}
		if rec == nil || len(rec.Changes) != n {
			t.Fatalf("recovered record for %s: %+v", callID, rec)
		}
		committed := 0
		for _, c := range rec.Changes {
			b, err := os.ReadFile(filepath.Join(base, c.Path))
			sum := sha256.Sum256(b)
			onHost := err == nil && "sha256:"+hex.EncodeToString(sum[:]) == c.SHA256
			if c.Committed != onHost {
				t.Errorf("%s: recovered says committed=%v, the host has it: %v", c.Path, c.Committed, onHost)
			}
			if c.Committed {
				committed++
			}
		}
		if committed < 500 || committed >= n || !strings.Contains(rec.Detail, fmt.Sprintf("%d of %d", committed, n)) {
			t.Errorf("%d of %d committed; detail %q", committed, n, rec.Detail)
		}
		ents, err := os.ReadDir(out)
		testutil.Must(t, err)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".sluice-tmp-") {
				t.Errorf("a commit's temp file survived the restart: %s", e.Name())
			}
		}
		if o, _, code := sluice(t, "", "audit", "verify", d.ledger()); code != 0 {
			t.Fatalf("audit verify after the crash: %s", o)
		}
		return
	}
	t.Fatal("the commit finished before the kill in 3 attempts")
}

func ledgerRecords(t *testing.T, path string) []audit.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	testutil.Must(t, err)
	var out []audit.Record
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r audit.Record
		if json.Unmarshal(line, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}
