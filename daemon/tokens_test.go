//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

// subUID is the uid a sub-agent dials as in these tests: principal "sub",
// which may call nothing of its own.
const subUID = 4242

// tokenFixture is a workspace whose src/pkg is a token's root, with ways
// out of it that stay inside the tool's root: a "..", a symlink to a
// file and one to a directory.
func tokenFixture(t *testing.T) (base, manifest string) {
	t.Helper()
	base = t.TempDir()
	for _, d := range []string{"workspace/src/pkg/sub", "workspace/src/other"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range map[string]string{"workspace/src/pkg/a.txt": "in pkg\n", "workspace/src/other/o.txt": "outside the token\n"} {
		if err := os.WriteFile(filepath.Join(base, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"workspace/src/pkg/out_link": "../other/o.txt", "workspace/src/pkg/dir_link": "../other"} {
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	manifest = writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"orch":{"uids":[%d],"tools":["*"],"approver":true},
	                "sub":{"uids":[%d],"tools":[]}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]},
	           "write_file":{"operation":"write","roots":["workspace/src"]},
	           "run_true":{"operation":"execute","commands":[["/bin/true"]]}}}`, os.Getuid(), subUID))
	return base, manifest
}

func startTokens(t *testing.T) (*harness, *fakeClock, string) {
	t.Helper()
	testutil.RequireRoot(t)
	base, m := tokenFixture(t)
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := start(t, m, securefs.ModeAuto, func(c *Config) { c.tokenNow = clk.now })
	return h, clk, base
}

// as returns a client of h's socket that presents tok ("" for none),
// dialing as uid (-1: this process's).
func (h *harness) as(tok string, uid int) *client.Client {
	h.t.Helper()
	c := client.New(h.socket)
	if uid >= 0 {
		c = client.NewWithDialer(h.socket, testutil.DialAs(h.socket, uid))
	}
	if tok != "" {
		if err := c.SetToken(tok); err != nil {
			h.t.Fatal(err)
		}
	}
	h.t.Cleanup(c.Close)
	return c
}

func (h *harness) mint(req api.TokenRequest) *api.TokenCreated {
	h.t.Helper()
	tc, err := h.c.CreateToken(context.Background(), req)
	if err != nil {
		h.t.Fatalf("mint %+v: %v", req, err)
	}
	if !strings.HasPrefix(tc.Token, api.TokenPrefix) || !strings.HasPrefix(tc.ID, "t-") {
		h.t.Fatalf("token %+v", tc)
	}
	return tc
}

func callWith(t *testing.T, c *client.Client, tool string, args any, task string) *api.CallResult {
	t.Helper()
	a, _ := json.Marshal(args)
	res, err := c.Call(context.Background(), api.CallRequest{Tool: tool, Args: a, Task: task})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	return res
}

func wantReason(t *testing.T, res *api.CallResult, want api.Reason, what string) {
	t.Helper()
	if res.Reason != want {
		t.Fatalf("%s: reason %s (verdict %s), want %s", what, res.Reason, res.Verdict, want)
	}
}

// TestTokenNarrows: a token minted for read_file beneath src/pkg reads
// there and nothing else: not a write, not the tool's root outside its
// own (by name, by "..", by a symlink to a file or a directory, and not
// even whether a file exists there), not another tool in GET /v1/tools.
// The records name the peer's principal and the token, never its secret.
func TestTokenNarrows(t *testing.T) {
	h, _, base := startTokens(t)
	tc := h.mint(api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"workspace/src/pkg"}, Subject: "sub-agent", TTLSeconds: 600})
	sub := h.as(tc.Token, subUID)

	if res := callWith(t, sub, "read_file", map[string]string{"path": "workspace/src/pkg/a.txt"}, ""); !res.OK || *res.Output != "in pkg\n" {
		t.Fatalf("read in the token's root: %+v", res)
	}
	wantReason(t, callWith(t, sub, "write_file", map[string]string{"path": "workspace/src/pkg/new.txt", "content": "x"}, ""),
		api.ReasonPrincipalNotAllowed, "write with a read-only token")
	if _, err := os.Stat(filepath.Join(base, "workspace/src/pkg/new.txt")); err == nil {
		t.Fatal("the write happened")
	}
	for _, p := range []string{
		"workspace/src/other/o.txt",                // in the tool's root, outside the token's
		"workspace/src/pkg/../other/o.txt",         // by ".."
		"workspace/src/pkg/sub/../../other/o.txt",  // by ".." deeper
		"workspace/src/pkg/out_link",               // a symlink to a file outside
		"workspace/src/pkg/dir_link/o.txt",         // through a symlink to a directory outside
		"workspace/src/pkg/dir_link/no_such_file",  // no oracle: not not_found
		"workspace/src/pkg/sub/../../other/absent", // nor by ".."
		"workspace/src",                            // the tool's root itself
	} {
		wantReason(t, callWith(t, sub, "read_file", map[string]string{"path": p}, ""), api.ReasonOutsideRoots, p)
	}
	wantReason(t, callWith(t, sub, "read_file", map[string]string{"path": "workspace/src/pkg/absent"}, ""), api.ReasonNotFound, "absent in the token's root")

	// A write token's roots narrow where a new file's parent resolves.
	wt := h.mint(api.TokenRequest{Tools: []string{"write_file"}, Roots: []string{"workspace/src/pkg"}})
	w := h.as(wt.Token, subUID)
	if res := callWith(t, w, "write_file", map[string]string{"path": "workspace/src/pkg/sub/w.txt", "content": "w"}, ""); !res.OK {
		t.Fatalf("write in the token's root: %s", res.Reason)
	}
	wantReason(t, callWith(t, w, "write_file", map[string]string{"path": "workspace/src/pkg/dir_link/w.txt", "content": "w"}, ""),
		api.ReasonOutsideRoots, "write through a symlinked directory")
	if _, err := os.Stat(filepath.Join(base, "workspace/src/other/w.txt")); err == nil {
		t.Fatal("the write through the symlink happened")
	}

	tools, err := sub.Tools(context.Background())
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "read_file" {
		t.Fatalf("tools with a token: %+v %v", tools, err)
	}
	// Without the token, uid 4242 is "sub": nothing.
	if tools, err := h.as("", subUID).Tools(context.Background()); err != nil || len(tools.Tools) != 0 {
		t.Fatalf("sub's own tools: %+v %v", tools, err)
	}

	list, err := h.c.Tokens(context.Background())
	if err != nil || len(list.Tokens) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if i := slices.IndexFunc(list.Tokens, func(ti api.TokenInfo) bool { return ti.ID == tc.ID }); i < 0 ||
		list.Tokens[i].Minter != "orch" || list.Tokens[i].Subject != "sub-agent" || list.Tokens[i].Roots[0] != "workspace/src/pkg" {
		t.Fatalf("list: %+v", list)
	}
	secret := tc.Token[strings.LastIndexByte(tc.Token, '_')+1:]
	b, _ := json.Marshal(list)
	led := h.ledger()
	if bytes.Contains(b, []byte(secret)) || bytes.Contains(led, []byte(secret)) || strings.Contains(h.logs.String(), secret) {
		t.Fatal("the token's secret was listed, recorded or logged")
	}
	want := `"name":"sub","pid":`
	ref := fmt.Sprintf(`"token":{"id":%q,"minter":"orch","subject":"sub-agent"}`, tc.ID)
	n := 0
	for _, line := range bytes.Split(led, []byte("\n")) {
		if bytes.Contains(line, []byte(ref)) && !bytes.Contains(line, []byte(`"kind":"token"`)) { // the minting's own record names the minter
			if bytes.Contains(line, []byte(`"kind":"decision"`)) {
				n++
			}
			if !bytes.Contains(line, []byte(want)) {
				t.Fatalf("a token's record does not name the peer's principal: %s", line)
			}
		}
	}
	if n != 11 { // one decision for each call the token made
		t.Fatalf("%d records name the token", n)
	}
}

// TestTokenMintRefused: a token cannot be minted beyond the minter's
// rights, nor by a token, nor by a uid that is no principal.
func TestTokenMintRefused(t *testing.T) {
	h, _, _ := startTokens(t)
	ctx := context.Background()
	cases := []struct {
		req    api.TokenRequest
		status int
		says   string
	}{
		{api.TokenRequest{}, 400, "tools: required"},
		{api.TokenRequest{Tools: []string{"no_such_tool"}}, 403, "may not call"},
		{api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"workspace"}}, 403, "none lies beneath"},
		{api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"workspace/src/../secret"}}, 400, `without ".."`},
		{api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"/etc"}}, 400, "relative"},
		{api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"workspace/src/pkg/a.txt"}}, 403, "directory"},
		{api.TokenRequest{Tools: []string{"read_file"}, Roots: []string{"workspace/src/pkg/dir_link"}}, 403, "as the kernel names it"},
		{api.TokenRequest{Tools: []string{"run_true"}, Roots: []string{"workspace/src/pkg"}}, 400, "has no roots"},
		{api.TokenRequest{Tools: []string{"read_file"}, TTLSeconds: api.MaxTokenTTLSeconds + 1}, 400, "ttl_s"},
	}
	for _, c := range cases {
		_, err := h.c.CreateToken(ctx, c.req)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != c.status || !strings.Contains(ae.Msg, c.says) {
			t.Errorf("%+v: %v, want %d %q", c.req, err, c.status, c.says)
		}
	}
	// sub may call nothing: it has nothing to delegate.
	if _, err := h.as("", subUID).CreateToken(ctx, api.TokenRequest{Tools: []string{"read_file"}}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("sub minted: %v", err)
	}
	// A token holder cannot mint (nor reach any endpoint a token does not take).
	tc := h.mint(api.TokenRequest{Tools: []string{"read_file"}})
	withTok := h.as(tc.Token, -1)
	if _, err := withTok.CreateToken(ctx, api.TokenRequest{Tools: []string{"read_file"}}); err == nil || !strings.Contains(err.Error(), api.ErrTokenInvalid) {
		t.Fatalf("a token minted: %v", err)
	}
	if _, err := withTok.Status(ctx); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a token read the status: %v", err)
	}
}

// TestTokenInvalid: a token expired (by the injected clock), revoked,
// revoked by its task's cancel, of another daemon, bound to another uid,
// or garbage is token_invalid, recorded, and never falls back to the
// peer's own rights (orch may call everything).
func TestTokenInvalid(t *testing.T) {
	h, clk, _ := startTokens(t)
	ctx := context.Background()
	read := map[string]string{"path": "workspace/src/pkg/a.txt"}
	ok := func(c *client.Client, what string) {
		t.Helper()
		if res := callWith(t, c, "read_file", read, ""); !res.OK {
			t.Fatalf("%s: %s", what, res.Reason)
		}
	}
	invalid := func(c *client.Client, what string) {
		t.Helper()
		wantReason(t, callWith(t, c, "read_file", read, ""), api.ReasonTokenInvalid, what)
	}

	// Expiry.
	exp := h.mint(api.TokenRequest{Tools: []string{"read_file"}, TTLSeconds: 60})
	ok(h.as(exp.Token, -1), "fresh")
	clk.add(61 * time.Second)
	invalid(h.as(exp.Token, -1), "expired")
	if _, err := h.as(exp.Token, -1).Tools(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("tools with an expired token: %v", err)
	}

	// Revocation, by the minter only (sub gets the 404 of an unknown id).
	rev := h.mint(api.TokenRequest{Tools: []string{"read_file"}})
	ok(h.as(rev.Token, -1), "before revoke")
	if _, err := h.as("", subUID).RevokeToken(ctx, rev.ID); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("sub revoked orch's token: %v", err)
	}
	ok(h.as(rev.Token, -1), "after another's revoke")
	if _, err := h.c.RevokeToken(ctx, rev.ID); err != nil {
		t.Fatal(err)
	}
	invalid(h.as(rev.Token, -1), "revoked")

	// A task: calls are pinned to it; cancelling it revokes the token.
	tt := h.mint(api.TokenRequest{Tools: []string{"read_file"}, Task: "job-7"})
	tk := h.as(tt.Token, subUID)
	ok(tk, "pinned, no task named")
	wantReason(t, callWith(t, tk, "read_file", read, "job-8"), api.ReasonPrincipalNotAllowed, "another task")
	if res := callWith(t, tk, "read_file", read, "job-7"); !res.OK {
		t.Fatalf("its own task: %s", res.Reason)
	}
	if _, err := h.c.CancelTask(ctx, "job-7"); err != nil {
		t.Fatal(err)
	}
	invalid(tk, "task cancelled")

	// Bound to a peer uid.
	bound := uint32(subUID)
	bt := h.mint(api.TokenRequest{Tools: []string{"read_file"}, PeerUID: &bound})
	ok(h.as(bt.Token, subUID), "the bound uid")
	invalid(h.as(bt.Token, -1), "another uid (orch's own, which could read)")

	// Another daemon's token, and garbage: orch's own rights would read.
	h2, _, _ := startTokens(t)
	foreign := h2.mint(api.TokenRequest{Tools: []string{"read_file"}})
	invalid(h.as(foreign.Token, -1), "foreign audience")
	for _, g := range []string{"garbage", api.TokenPrefix + "x_y", foreign.Token[:len(foreign.Token)-1] + "0"} {
		invalid(h.as(g, -1), g)
	}
	code, body := func() (int, []byte) {
		c := h.as("", -1)
		_ = c.SetToken("x")
		code, b, err := c.CallRaw(ctx, []byte(`{"tool":"read_file","args":{"path":"workspace/src/pkg/a.txt"}}`))
		if err != nil {
			t.Fatal(err)
		}
		return code, b
	}()
	if code != 200 || !bytes.Contains(body, []byte(`"reason":"token_invalid"`)) {
		t.Fatalf("raw call with a garbage token: %d %s", code, body)
	}

	led := h.ledger()
	if n := bytes.Count(led, []byte(`"reason":"token_invalid"`)); n < 9 {
		t.Fatalf("%d token_invalid records, want each refusal recorded", n)
	}
	for _, tok := range []string{exp.Token, rev.Token, tt.Token, bt.Token, foreign.Token} {
		if bytes.Contains(led, []byte(tok[strings.LastIndexByte(tok, '_')+1:])) {
			t.Fatal("a token's secret is in the ledger")
		}
	}
	// The pinned call was recorded under the token's task.
	if !bytes.Contains(led, []byte(`"task":"job-7"`)) {
		t.Fatal("a pinned call's records lack its task")
	}
}

// TestTokenReload: a reload that takes a right from the minter takes it
// from its tokens too.
func TestTokenReload(t *testing.T) {
	testutil.RequireRoot(t)
	base, m := tokenFixture(t)
	h := start(t, m, securefs.ModeAuto)
	tc := h.mint(api.TokenRequest{Tools: []string{"read_file"}})
	sub := h.as(tc.Token, subUID)
	read := map[string]string{"path": "workspace/src/pkg/a.txt"}
	if res := callWith(t, sub, "read_file", read, ""); !res.OK {
		t.Fatal(res.Reason)
	}
	writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"orch":{"uids":[%d],"tools":["write_file"],"approver":true}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]},
	           "write_file":{"operation":"write","roots":["workspace/src"]}}}`, os.Getuid()))
	if _, err := h.c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantReason(t, callWith(t, sub, "read_file", read, ""), api.ReasonPrincipalNotAllowed, "after the minter lost read_file")
	if tools, err := sub.Tools(context.Background()); err != nil || len(tools.Tools) != 0 {
		t.Fatalf("tools: %+v %v", tools, err)
	}
}

// TestTokenBudget: a token's calls are admitted and counted against the
// token, with its minter's denial_budget: a sub-agent probing through a
// token is cut off (budget_exhausted, naming the token) while its minter's
// own calls go on; an approver sees the token's budget in status as
// "token:ID" and resets it; a revoked token's budget is gone.
func TestTokenBudget(t *testing.T) {
	testutil.RequireRoot(t)
	base, _ := tokenFixture(t)
	m := writeManifest(t, base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"orch":{"uids":[%d],"tools":["*"],"approver":true,"denial_budget":{"denials":3,"window_s":600}}},
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]}}}`, os.Getuid()))
	h := start(t, m, securefs.ModeAuto)
	tc := h.mint(api.TokenRequest{Tools: []string{"read_file"}, Subject: "prober", TTLSeconds: 600})
	sub := h.as(tc.Token, -1)
	for i := range 3 {
		res := callWith(t, sub, "read_file", map[string]string{"path": fmt.Sprintf("workspace/src/missing%d", i)}, "")
		wantReason(t, res, api.ReasonNotFound, "a probe")
	}
	res := callWith(t, sub, "read_file", map[string]string{"path": "workspace/src/pkg/a.txt"}, "")
	wantReason(t, res, api.ReasonBudgetExhausted, "the token's read after its budget is spent")
	if !strings.Contains(res.Detail, "token "+tc.ID) {
		t.Errorf("the refusal does not name the token: %q", res.Detail)
	}
	// The minter's own calls are its own budget's.
	res = callWith(t, h.c, "read_file", map[string]string{"path": "workspace/src/pkg/a.txt"}, "")
	wantReason(t, res, api.ReasonAllowed, "the minter's own read")
	st, err := h.c.Status(context.Background())
	testutil.Must(t, err)
	found := false
	for _, b := range st.Budgets {
		if b.Principal == "token:"+tc.ID && b.DenialBudget != nil && b.DenialBudget.ExhaustedUntil != "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("status lacks the token's spent budget: %+v", st.Budgets)
	}
	if _, err := h.c.ResetBudget(context.Background(), "token:"+tc.ID); err != nil {
		t.Fatal(err)
	}
	res = callWith(t, sub, "read_file", map[string]string{"path": "workspace/src/pkg/a.txt"}, "")
	wantReason(t, res, api.ReasonAllowed, "the token's read after the reset")
	if _, err := h.c.RevokeToken(context.Background(), tc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.ResetBudget(context.Background(), "token:"+tc.ID); err == nil {
		t.Fatal("a revoked token still has a budget to reset")
	}
	// Minting and revoking are records of their own, never the token.
	if bytes.Contains(h.ledger(), []byte(tc.Token)) {
		t.Fatal("the token is in the ledger")
	}
	for _, what := range []string{"minted", "revoked by orch"} {
		if recs := ledgerRecords(t, h, audit.KindToken, func(r *audit.Record) bool {
			return r.Detail == what && r.Token != nil && r.Token.ID == tc.ID && r.Principal != nil && r.Principal.Name == "orch"
		}); len(recs) != 1 {
			t.Errorf("%d token records %q of %s, want 1", len(recs), what, tc.ID)
		}
	}
}

// TestTokenRevokeEndsItsCalls: revoking a token ends the calls in flight
// made with it (reason cancelled, the detail naming the revoke), as a
// task cancel does; nothing keeps running on a token that no longer is.
func TestTokenRevokeEndsItsCalls(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeManifest(t, fx.Base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"orch":{"uids":[%d],"tools":["*"],"approver":true}},
	  "tools":{"sleeper":{"operation":"execute","commands":[["sleep","30"]],"timeout_ms":60000,"pool":0}}}`, os.Getuid()))
	h := start(t, m, securefs.ModeAuto)
	tc := h.mint(api.TokenRequest{Tools: []string{"sleeper"}, Subject: "sub", TTLSeconds: 600})
	sub := h.as(tc.Token, -1)
	sleeper := startStream(sub, context.Background(), api.CallRequest{Tool: "sleeper"})
	if ev := sleeper.next(t, "the sleeper's decision"); ev.Verdict != api.VerdictAllow {
		t.Fatalf("sleeper: %s", ev.Raw)
	}
	if _, err := h.c.RevokeToken(context.Background(), tc.ID); err != nil {
		t.Fatal(err)
	}
	if r := sleeper.wait(t); r.Reason != api.ReasonCancelled || r.OK {
		t.Fatalf("the token's call after its revoke: %+v", r)
	}
	if rec := ledgerResult(t, h, sleeper.res.CallID); !strings.Contains(fmt.Sprint(rec["detail"]), "token "+tc.ID+" revoked") {
		t.Fatalf("result record: %v", rec)
	}
}

// TestTokenCallParkedShowsToken: a call parked for approval that was made
// with a delegation token is listed with the token (id, subject) beside
// its principal, the minter: an approver sees a sub-agent's call as one.
func TestTokenCallParkedShowsToken(t *testing.T) {
	testutil.RequireRoot(t)
	fx := escapetest.Build(t)
	testutil.Must(t, os.Chmod(fx.Base, 0o755))
	m := writeManifest(t, fx.Base, fmt.Sprintf(`{"schema_version":1,
	  "principals":{"agent":{"uids":[%d],"tools":["*"]},"ops":{"uids":[0],"tools":[],"approver":true}},
	  "tools":{"gated":{"operation":"read","roots":["workspace/src"],"approval":"human"}}}`, agentUID))
	h := start(t, m, securefs.ModeAuto)
	agent := clientAs(h.socket, agentUID)
	defer agent.Close()
	tc, err := agent.CreateToken(context.Background(), api.TokenRequest{Tools: []string{"gated"}, Subject: "reviewer", TTLSeconds: 600})
	testutil.Must(t, err)
	sub := clientAs(h.socket, agentUID)
	defer sub.Close()
	testutil.Must(t, sub.SetToken(tc.Token))
	done := make(chan *api.CallResult, 1)
	go func() {
		r, _ := sub.Call(context.Background(), api.CallRequest{Tool: "gated", Args: json.RawMessage(`{"path":"workspace/src/a.py"}`)})
		done <- r
	}()
	a := waitListed(t, h, 1)[0]
	if a.Principal != "agent" || a.Token == nil || a.Token.ID != tc.ID || a.Token.Subject != "reviewer" {
		t.Fatalf("listed: %+v (token %+v)", a, a.Token)
	}
	if _, err := h.c.Decide(context.Background(), a.ApprovalID, false, "no"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Reason != api.ReasonApprovalDenied {
		t.Fatalf("the token's parked call: %+v", r)
	}
}
