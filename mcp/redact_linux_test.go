package mcp_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPRedacted: through the bridge, a read of a file holding an AWS
// key id comes back with it replaced, and its source names no digest.
// (The fixture's read_file has a small max_bytes: one secret.)
func TestMCPRedacted(t *testing.T) {
	fx, m := fixture(t, "")
	const keyID = "AKIAMCPTESTKEY7Q2WXY"
	if err := os.WriteFile(filepath.Join(fx.Base, "workspace/src/creds.ini"), []byte("id "+keyID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(m)
	on := bytes.Replace(raw, []byte(`{"schema_version":1,`), []byte(`{"schema_version":1,"redact":{},`), 1)
	if bytes.Equal(on, raw) {
		t.Fatal("the fixture's manifest changed: update this test")
	}
	os.WriteFile(m, on, 0o644)
	d := startSluiced(t, m)
	s := connect(t, d.socket, clientAs(d.socket, agentUID), "")
	res := s.mustCall(t, "read_file", map[string]any{"path": "workspace/src/creds.ini"})
	text := texts(res)
	if res.IsError || strings.Contains(text, keyID) || text != "id [REDACTED:aws_access_key_id]\n" {
		t.Fatalf("read through MCP: %q", text)
	}
	if st := structured(t, res); st.Source == nil || st.Source.SHA256 != "" {
		t.Errorf("a redacted read's source: %+v (a digest of what was read would confirm a guess)", st.Source)
	}
}
