//go:build linux

package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

// TestMCPToken: a bridge whose client presents a delegation token (what
// `sluice mcp --token-file` builds) lists only the token's tools and is
// decided by the token, not by the rights of the uid that runs it: here
// uid 0 is "ops", which may call nothing of its own, holding a token
// agent minted for read_file beneath workspace/src/sub. The ledger names
// ops and the token, never the token's secret.
func TestMCPToken(t *testing.T) {
	_, m := fixture(t, "")
	d := startSluiced(t, m)
	agent := clientAs(d.socket, agentUID)
	defer agent.Close()
	tc, err := agent.CreateToken(context.Background(), api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"workspace/src/sub"}, Subject: "mcp-sub"})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tc.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := client.ReadTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(d.socket) // uid 0: ops
	if err := c.SetToken(tok); err != nil {
		t.Fatal(err)
	}
	s := connect(t, d.socket, c, "")
	lt, err := s.ListTools(context.Background(), nil)
	if err != nil || len(lt.Tools) != 1 || lt.Tools[0].Name != "read_file" {
		t.Fatalf("tools/list with a token: %+v %v", lt, err)
	}
	res := s.mustCall(t, "read_file", map[string]any{"path": "workspace/src/sub/b.txt"})
	if res.IsError || texts(res) != "b\n" {
		t.Fatalf("read in the token's root: %+v", res)
	}
	res = s.mustCall(t, "read_file", map[string]any{"path": "workspace/src/a.py"})
	if !res.IsError || structured(t, res).Reason != api.ReasonOutsideRoots {
		t.Fatalf("read outside the token's root: %+v", res)
	}
	n := 0
	for _, r := range d.ledger(t) {
		if r["kind"] != "decision" {
			continue
		}
		tr, _ := r["token"].(map[string]any)
		p, _ := r["principal"].(map[string]any)
		if tr["id"] == tc.ID && tr["minter"] == "agent" && tr["subject"] == "mcp-sub" && p["name"] == "ops" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d decision records name ops and the token", n)
	}
	b, _ := os.ReadFile(filepath.Join(d.stateDir, "audit.jsonl"))
	if strings.Contains(string(b), tok[strings.LastIndexByte(tok, '_')+1:]) {
		t.Fatal("the token's secret is in the ledger")
	}
}
