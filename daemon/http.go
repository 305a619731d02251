//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/transport"
)

type route struct {
	method string
	h      func(http.ResponseWriter, *http.Request, Peer)
	// dots: the route's path segment is a caller-chosen id (a task), which
	// may hold "..": it is one segment, never a path.
	dots bool
}

// routes is a small exact-path router, so that 404 and 405 answer in JSON
// like everything else.
func (d *Daemon) routes() http.Handler {
	table := map[string]route{
		"/v1/calls":     {method: http.MethodPost, h: d.handleCall},
		"/v1/health":    {method: http.MethodGet, h: d.handleHealth},
		"/v1/tools":     {method: http.MethodGet, h: d.handleTools},
		"/v1/reload":    {method: http.MethodPost, h: d.handleReload},
		"/v1/approvals": {method: http.MethodGet, h: d.handleApprovals},
		"/v1/events":    {method: http.MethodGet, h: d.handleEvents},
		"/v1/status":    {method: http.MethodGet, h: d.handleStatus},
		"/v1/tasks":     {method: http.MethodGet, h: d.handleTasks},
		api.PathMCP:     {method: http.MethodPost, h: d.handleMCP},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, ok := transport.PeerFrom(r.Context())
		if !ok {
			// No kernel-attested identity, no service.
			writeError(w, http.StatusForbidden, api.ErrForbidden, "peer credentials unavailable")
			return
		}
		if refuseMisplacedToken(w, r) {
			return
		}
		rt, ok := table[r.URL.Path]
		if !ok {
			rt, ok = d.paramRoute(r)
		}
		if !ok || !rt.dots && strings.Contains(r.URL.Path, "..") {
			writeError(w, http.StatusNotFound, api.ErrNotFound, "no such endpoint: "+r.URL.Path)
			return
		}
		if r.Method != rt.method {
			w.Header().Set("Allow", rt.method)
			writeError(w, http.StatusMethodNotAllowed, api.ErrMethodNotAllowed, r.Method+" not allowed; use "+rt.method)
			return
		}
		rt.h(w, r, peer)
	})
}

// paramRoute matches the routes that carry an id in the path:
// /v1/approvals/{id}, /v1/calls/{call_id}/cancel,
// /v1/budgets/{principal}/reset and /v1/tasks/{task}/cancel. The segment is taken
// from the escaped path, so a task id may hold any character but a
// control one.
func (d *Daemon) paramRoute(r *http.Request) (route, bool) {
	if rt, ok := d.tokenRoute(r); ok {
		return rt, true
	}
	p := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(p, "/v1/approvals/"); ok && rest != "" && !strings.Contains(rest, "/") {
		id, err := url.PathUnescape(rest)
		if err != nil {
			return route{}, false
		}
		return route{method: http.MethodPost, h: func(w http.ResponseWriter, r *http.Request, peer Peer) {
			d.handleApprovalDecide(w, r, peer, id)
		}}, true
	}
	if rest, ok := strings.CutPrefix(p, "/v1/calls/"); ok {
		if seg, ok := strings.CutSuffix(rest, "/cancel"); ok && seg != "" && !strings.Contains(seg, "/") {
			id, err := url.PathUnescape(seg)
			if err != nil {
				return route{}, false
			}
			return route{method: http.MethodPost, h: func(w http.ResponseWriter, r *http.Request, peer Peer) {
				d.handleCallCancel(w, r, peer, id)
			}}, true
		}
	}
	if rest, ok := strings.CutPrefix(p, "/v1/caches/"); ok {
		if seg, ok := strings.CutSuffix(rest, "/clear"); ok && seg != "" && !strings.Contains(seg, "/") {
			tool, err := url.PathUnescape(seg)
			if err != nil {
				return route{}, false
			}
			return route{method: http.MethodPost, h: func(w http.ResponseWriter, r *http.Request, peer Peer) {
				d.handleCacheClear(w, r, peer, tool)
			}}, true
		}
	}
	if rest, ok := strings.CutPrefix(p, "/v1/budgets/"); ok {
		if seg, ok := strings.CutSuffix(rest, "/reset"); ok && seg != "" && !strings.Contains(seg, "/") {
			principal, err := url.PathUnescape(seg)
			if err != nil {
				return route{}, false
			}
			// dots: a principal's name may hold ".." (one segment, never a path).
			return route{method: http.MethodPost, dots: true, h: func(w http.ResponseWriter, r *http.Request, peer Peer) {
				d.handleBudgetReset(w, r, peer, principal)
			}}, true
		}
	}
	if rest, ok := strings.CutPrefix(p, "/v1/tasks/"); ok {
		if seg, ok := strings.CutSuffix(rest, "/cancel"); ok && seg != "" && !strings.Contains(seg, "/") {
			task, err := url.PathUnescape(seg)
			if err != nil || len(task) > maxTaskID || strings.ContainsFunc(task, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				return route{}, false
			}
			return route{method: http.MethodPost, dots: true, h: func(w http.ResponseWriter, r *http.Request, peer Peer) {
				d.handleTaskCancel(w, r, peer, task)
			}}, true
		}
	}
	return route{}, false
}

// writeJSON sends v with a Content-Length (no chunked encoding).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b []byte
	ok := false
	if r, isResult := v.(api.CallResult); isResult {
		// A call's result, by far the most frequent response: encoded
		// without reflection, the same bytes as Marshal (wirejson.go).
		n := 768 + len(r.Stderr) + len(r.OutputB64) // the fields and a source: one allocation
		if r.Output != nil {
			n += len(*r.Output) + len(*r.Output)/8
		}
		b, ok = appendCallResult(make([]byte, 0, n), &r)
	}
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal_error","message":"encode response"}}`)
		}
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}

// handleHealth reports the ledger's state with the daemon's: a daemon whose
// ledger cannot write denies every call audit_unavailable, and one whose
// ledger runs on its reserve is about to (review finding 5), so neither
// may say plain "ok".
func (d *Daemon) handleHealth(w http.ResponseWriter, r *http.Request, _ Peer) {
	p := d.acquire()
	defer p.release()
	h := api.Health{Status: "ok", Audit: "ok", Version: api.Version, PolicyVersion: p.m.Version}
	if err := d.ledger.Health(); err != nil {
		h.Status, h.Audit, h.AuditError = "degraded", "degraded", err.Error()
	}
	writeJSON(w, http.StatusOK, h)
}

func (d *Daemon) handleTools(w http.ResponseWriter, r *http.Request, peer Peer) {
	p := d.acquire()
	defer p.release()
	name, only, ok := d.toolsToken(w, r, peer, p.m)
	if !ok {
		return
	}
	out := api.Tools{Tools: []api.Tool{}}
	for _, tn := range p.m.ToolNames(name) {
		if only != nil && !slices.Contains(only, tn) {
			continue // a token's tools only
		}
		t := p.m.Tools[tn]
		out.Tools = append(out.Tools, api.Tool{
			Name: tn, Operation: t.Operation, Description: describe(tn, t), ArgsSchema: argsSchema(t),
			Network: reachesNetwork(t), Hints: hintsOf(t),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// reachesNetwork says whether a tool reaches the network: its operation
// does (a URL target: fetch, post), or its commands may (egress).
func reachesNetwork(t *authz.Tool) bool {
	o := authz.LookupOp(t.Operation)
	return (o != nil && o.Network()) || t.Egress != nil
}

// hintsOf is what t's operation says of its effects; none for an
// operation sluiced does not know (nothing is promised).
func hintsOf(t *authz.Tool) api.ToolHints {
	if o := authz.LookupOp(t.Operation); o != nil {
		return o.Hints
	}
	return api.ToolHints{}
}

func (d *Daemon) handleReload(w http.ResponseWriter, r *http.Request, peer Peer) {
	p := d.acquire()
	name, _ := p.m.Identify(callerOf(peer))
	approver := p.m.IsApprover(name, peer.UID)
	p.release()
	if !approver {
		writeError(w, http.StatusForbidden, api.ErrForbidden, "only an approver principal may reload the manifest")
		return
	}
	np, err := d.reload()
	if err != nil {
		d.log.Error("reload refused; keeping the current manifest", "err", err)
		code := http.StatusInternalServerError
		if errors.Is(err, authz.ErrInvalidManifest) {
			code = http.StatusUnprocessableEntity
		}
		writeError(w, code, "invalid_manifest", err.Error()+" (the previous manifest stays in force)")
		return
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: api.Version, PolicyVersion: np.m.Version})
}
