//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
)

// tokenEndpoints are the endpoints a sub-agent uses, which take a token
// (docs/api.md, "Delegation tokens"); a token presented anywhere else is
// refused (403), never ignored: the request would otherwise run with the
// peer's own rights.
func tokenEndpoint(r *http.Request) bool {
	switch p := r.URL.Path; {
	case p == "/v1/calls", p == "/v1/tools", p == "/v1/events", p == "/v1/health", p == api.PathMCP:
		return true
	case strings.HasPrefix(p, "/v1/calls/") && strings.HasSuffix(p, "/cancel"):
		return true
	}
	return false
}

// refuseMisplacedToken answers a request that presents a token to an
// endpoint that takes none; it reports whether it did.
func refuseMisplacedToken(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") == "" || tokenEndpoint(r) {
		return false
	}
	writeError(w, http.StatusForbidden, api.ErrTokenInvalid,
		r.URL.Path+" takes no token: a delegation token may only make calls, list its tools and follow events (tokens are minted and managed by the principal itself)")
	return true
}

// tokenRoute matches /v1/tokens (GET, POST) and /v1/tokens/{id} (DELETE).
func (d *Daemon) tokenRoute(r *http.Request) (route, bool) {
	p := r.URL.EscapedPath()
	if p == "/v1/tokens" {
		switch r.Method {
		case http.MethodGet:
			return route{method: http.MethodGet, h: d.handleTokenList}, true
		case http.MethodPost:
			return route{method: http.MethodPost, h: d.handleTokenCreate}, true
		}
		return route{method: "GET, POST"}, true
	}
	if rest, ok := strings.CutPrefix(p, "/v1/tokens/"); ok && rest != "" && !strings.Contains(rest, "/") {
		id, err := url.PathUnescape(rest)
		if err != nil {
			return route{}, false
		}
		return route{method: http.MethodDelete, h: func(w http.ResponseWriter, r *http.Request, peer Peer) {
			d.handleTokenRevoke(w, r, peer, id)
		}}, true
	}
	return route{}, false
}

// handleTokenCreate is POST /v1/tokens: the peer's principal mints a token
// that can only narrow its own rights. A malformed request is 400; one
// that asks for more than the minter has (a tool it may not call, a root
// not beneath that tool's roots) is 403 naming what and why.
func (d *Daemon) handleTokenCreate(w http.ResponseWriter, r *http.Request, peer Peer) {
	body, status, err := readBody(w, r, 64<<10)
	if err != nil {
		writeError(w, status, api.ErrBadRequest, err.Error())
		return
	}
	var req api.TokenRequest
	if err := strictDecode(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, describeJSONError("", err).Error())
		return
	}
	p := d.acquire()
	defer p.release()
	minter, _ := p.m.Identify(callerOf(peer))
	if minter == "" {
		writeError(w, http.StatusForbidden, api.ErrForbidden, fmt.Sprintf("uid %d is not a principal of the manifest: it has no rights to delegate", peer.UID))
		return
	}
	g, ttl, code, err := p.checkTokenRequest(minter, &req)
	if err != nil {
		apiCode := api.ErrBadRequest
		if code == http.StatusForbidden {
			apiCode = api.ErrForbidden
		}
		writeError(w, code, apiCode, err.Error())
		return
	}
	tok, err := d.tokens.mint(g, ttl)
	if errors.Is(err, errTooManyTokens) {
		writeError(w, http.StatusTooManyRequests, "too_many_tokens",
			fmt.Sprintf("principal %q holds %d live tokens, the most it may; revoke some (sluice token revoke ID) or let them expire", minter, maxTokensPerMinter))
		return
	}
	if err == nil {
		if aerr := d.auditToken(p.m.Version, peer, minter, g, "minted"); aerr != nil {
			// Fail closed: a token the ledger does not know of is never
			// handed out.
			d.tokens.revoke(g.id, minter, true)
			d.log.Error("audit token record failed; the token was not handed out", "err", aerr, "minter", minter)
			writeError(w, http.StatusServiceUnavailable, api.ErrUnavailable, "the audit ledger cannot be written; no token was minted")
			return
		}
	}
	d.tokensChanged() // its budget: its minter's limits, counted apart
	d.log.Info("token minted", "token_id", g.id, "minter", minter, "subject", g.subject, "tools", g.tools,
		"roots", g.roots, "task", g.task, "peer_uid", g.peerUID, "expires", g.expires.UTC().Format(time.RFC3339))
	writeJSON(w, http.StatusOK, api.TokenCreated{Token: tok, ID: g.id, ExpiresAt: g.expires.UTC().Format(time.RFC3339Nano)})
}

// checkTokenRequest validates a mint request of minter under the policy,
// in order: its shape (400), then that it only narrows the minter (403).
func (p *policy) checkTokenRequest(minter string, req *api.TokenRequest) (*tokenGrant, time.Duration, int, error) {
	bad := func(format string, a ...any) (*tokenGrant, time.Duration, int, error) {
		return nil, 0, http.StatusBadRequest, fmt.Errorf(format, a...)
	}
	beyond := func(format string, a ...any) (*tokenGrant, time.Duration, int, error) {
		return nil, 0, http.StatusForbidden, fmt.Errorf(format+" (a token can only narrow its minter's rights)", a...)
	}
	g := &tokenGrant{minter: minter, subject: req.Subject, task: req.Task, peerUID: req.PeerUID}
	switch {
	case len(req.Tools) == 0:
		return bad("tools: required: name the tools the token may call")
	case len(req.Tools) > maxTokenTools:
		return bad("tools: at most %d", maxTokenTools)
	case len(req.Roots) > maxTokenRoots:
		return bad("roots: at most %d", maxTokenRoots)
	case req.TTLSeconds < 0 || req.TTLSeconds > api.MaxTokenTTLSeconds:
		return bad("ttl_s: %d is not between 1 and %d (24 h); omit it for %d", req.TTLSeconds, api.MaxTokenTTLSeconds, api.DefaultTokenTTLSeconds)
	case len(req.Task) > maxTaskID || strings.ContainsFunc(req.Task, isControl):
		return bad("task: at most %d bytes, no control characters", maxTaskID)
	case len(req.Subject) > maxSubject || strings.ContainsFunc(req.Subject, isControl):
		return bad("subject: at most %d bytes, no control characters", maxSubject)
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if ttl == 0 {
		ttl = api.DefaultTokenTTLSeconds * time.Second
	}
	for i, tn := range req.Tools {
		if slices.Contains(req.Tools[:i], tn) {
			return bad("tools[%d]: %q is named twice", i, tn)
		}
		if !p.m.MayCall(minter, tn) {
			return beyond("tools[%d]: principal %q may not call %q", i, minter, tn)
		}
	}
	g.tools = slices.Clone(req.Tools)
	if len(req.Roots) == 0 {
		return g, ttl, 0, nil
	}
	for i, r := range req.Roots {
		if authz.CheckPath(r) != "" || slices.Contains(strings.Split(r, "/"), "..") {
			return bad("roots[%d]: %q is not a path relative to base without \"..\" (as a tool's roots are written, e.g. \"workspace/src/pkg\")", i, r)
		}
		g.roots = append(g.roots, path.Clean(r))
	}
	for _, tn := range req.Tools {
		t := p.m.Tools[tn]
		if len(t.Roots) == 0 {
			return bad("tools: %q has no roots (operation %s), so roots cannot narrow it: mint a token with roots for file tools only", tn, t.Operation)
		}
		n := 0
		for _, r := range g.roots {
			if len(authz.MatchRoots(t, r)) > 0 {
				n++
			}
		}
		if n == 0 {
			return beyond("roots: none lies beneath a root of %q (%s)", tn, strings.Join(t.Roots, ", "))
		}
	}
	for i, r := range g.roots {
		found, dir := false, false
		for _, tn := range req.Tools {
			t := p.m.Tools[tn]
			for _, m := range authz.MatchRoots(t, r) {
				found = true
				if rt := p.roots[tn]; m.Index < len(rt) && rt[m.Index] != nil {
					if sub, err := rt[m.Index].OpenRootBeneath(m.Rel); err == nil {
						rel, err := rt[m.Index].RelOf(sub)
						sub.Close()
						if err == nil && rel != path.Clean(m.Rel) {
							return beyond("roots[%d]: %q is %q beneath %q as the kernel names it (a symlink on the way): give a token root as the kernel names it", i, r, rel, m.Root)
						}
						dir = true
					}
				}
			}
		}
		if !found {
			return beyond("roots[%d]: %q lies beneath no root of the token's tools", i, r)
		}
		if !dir {
			return beyond("roots[%d]: %q does not resolve to a directory beneath the roots of the token's tools", i, r)
		}
	}
	return g, ttl, 0, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// handleTokenList is GET /v1/tokens: the caller's own live tokens; an
// approver's, every principal's. Never a secret.
func (d *Daemon) handleTokenList(w http.ResponseWriter, r *http.Request, peer Peer) {
	p := d.acquire()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	p.release()
	if name == "" {
		writeError(w, http.StatusForbidden, api.ErrForbidden, fmt.Sprintf("uid %d is not a principal of the manifest", peer.UID))
		return
	}
	writeJSON(w, http.StatusOK, api.Tokens{Tokens: d.tokens.list(name, approver)})
}

// handleTokenRevoke is DELETE /v1/tokens/{id}: the minter or an approver
// revokes a token; calls presenting it from now on are token_invalid, and
// a call with it parked for approval is denied when it is decided again.
// Another principal's token is the same 404 as an unknown id.
func (d *Daemon) handleTokenRevoke(w http.ResponseWriter, r *http.Request, peer Peer, id string) {
	p := d.acquire()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	version := p.m.Version
	p.release()
	if !d.tokens.revoke(id, name, approver) {
		writeError(w, http.StatusNotFound, api.ErrNotFound, "no live token "+strconv.Quote(id)+" of yours")
		return
	}
	d.tokensChanged()
	ended := d.calls.cancelTokenCalls(id, "token "+id+" revoked by "+name)
	if err := d.auditToken(version, peer, name, &tokenGrant{id: id}, "revoked by "+name); err != nil {
		d.log.Error("audit token record failed (the token is revoked)", "err", err, "token_id", id)
	}
	d.log.Info("token revoked", "token_id", id, "by", name, "calls_ended", ended)
	writeJSON(w, http.StatusOK, api.TokenRevoked{ID: id})
}

// toolsToken is GET /v1/tools for a token: the token's tools that its
// minter may call now. It reports false (and answers 401) for a refused
// token.
func (d *Daemon) toolsToken(w http.ResponseWriter, r *http.Request, peer Peer, m *authz.Manifest) (name string, only []string, ok bool) {
	tu := d.useToken(r.Header.Get("Authorization"), peer)
	if tu == nil {
		name, _ = m.Identify(callerOf(peer))
		return name, nil, true
	}
	if tu.err != nil {
		writeError(w, http.StatusUnauthorized, api.ErrTokenInvalid, "the token is not valid here (unknown, expired, revoked, of another sluiced, or bound to another uid)")
		return "", nil, false
	}
	return tu.g.minter, tu.g.tools, true
}

// eventsToken says whether a peer may follow events: a principal of the
// manifest, or the holder of a valid token. A refused token is answered
// 401 here.
func (d *Daemon) eventsToken(w http.ResponseWriter, r *http.Request, peer Peer, m *authz.Manifest) (known, answered bool) {
	tu := d.useToken(r.Header.Get("Authorization"), peer)
	if tu == nil {
		_, known = m.Identify(callerOf(peer))
		return known, false
	}
	if tu.err != nil {
		writeError(w, http.StatusUnauthorized, api.ErrTokenInvalid, "the token is not valid here (unknown, expired, revoked, of another sluiced, or bound to another uid)")
		return false, true
	}
	return true, false
}

// cancelAs is who may cancel a call by id: without a token, the peer's
// principal (an approver any call); with a valid token, only the calls
// made with that same token.
func (d *Daemon) cancelWithToken(w http.ResponseWriter, r *http.Request, peer Peer, id string) (handled bool) {
	tu := d.useToken(r.Header.Get("Authorization"), peer)
	if tu == nil {
		return false
	}
	if tu.err != nil {
		writeError(w, http.StatusUnauthorized, api.ErrTokenInvalid, "the token is not valid here (unknown, expired, revoked, of another sluiced, or bound to another uid)")
		return true
	}
	if !d.calls.cancelTokenCall(id, tu.g.id, "token "+tu.g.id) {
		writeError(w, http.StatusNotFound, api.ErrNotFound, "no call "+strconv.Quote(id)+" made with this token is in flight")
		return true
	}
	d.log.Info("call cancelled", "call_id", id, "by_token", tu.g.id)
	writeJSON(w, http.StatusOK, api.CallCancel{CallID: id})
	return true
}

// cancelTokenCall ends the call with this id when it was made with the
// token tokenID; false for any other call, as for an unknown id.
func (g *registry) cancelTokenCall(id, tokenID, by string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.calls[id]
	if c == nil || c.answered.Load() || tokenID == "" || c.tokenID() != tokenID {
		return false
	}
	c.stop(&cancelError{by: by})
	return true
}

// cancelTokenCalls ends every call in flight made with token tokenID
// (a revoke's: nothing keeps running on a token that no longer is), and
// says how many.
func (g *registry) cancelTokenCalls(tokenID, by string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.calls {
		if tokenID != "" && c.tokenID() == tokenID && !c.answered.Load() {
			c.stop(&cancelError{by: by})
			n++
		}
	}
	return n
}

// pinTask gives a call that names no task its token's task, before the
// call is registered under it (so a cancel of the task ends it).
func (tu *tokenUse) pinTask(dc *decoded) {
	if tu != nil && tu.err == nil && tu.g.task != "" && dc.req.Task == "" {
		dc.req.Task = tu.g.task
	}
}

// auditToken records a token minted or revoked (audit.KindToken), synced:
// its ref and what it narrows to, never the token.
func (d *Daemon) auditToken(version string, peer Peer, name string, g *tokenGrant, what string) error {
	rec := &audit.Record{Kind: audit.KindToken, PolicyVersion: version, Detail: what,
		Principal: &audit.Principal{Name: name, UID: peer.UID, GID: peer.GID, PID: peer.PID, Cgroup: peer.Cgroup},
		Token:     &audit.TokenRef{ID: g.id, Minter: g.minter, Subject: g.subject}}
	if g.minter != "" {
		args, err := json.Marshal(g.info())
		if err != nil {
			return err
		}
		rec.Args = args
	}
	return d.ledger.AppendSync(rec)
}
