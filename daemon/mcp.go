//go:build linux

package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/daemon/mcphost"
	"github.com/sluicehq/sluice/daemon/transport"
)

// handleMCP attaches a `sluice mcp` session (POST /v1/mcp, docs/clients.md
// "Attached sessions"): the request is read and checked here, the
// connection is then the session host's (daemon/mcphost), which serves
// the session as this peer, with the request's token and task.
func (d *Daemon) handleMCP(w http.ResponseWriter, r *http.Request, peer Peer) {
	var req api.MCPAttachRequest
	body, status, err := readBody(w, r, 4<<10)
	if err != nil {
		writeError(w, status, api.ErrBadRequest, err.Error())
		return
	}
	if len(body) > 0 {
		if err := strictDecode(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, api.ErrBadRequest, describeJSONError("body", err).Error())
			return
		}
	}
	if len(req.Task) > maxTaskID || strings.ContainsFunc(req.Task, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, "task: at most 128 bytes, no control characters")
		return
	}
	// As for events: a principal of the manifest, or a valid token (a
	// 401 otherwise), so that uids the manifest does not name cannot
	// hold the connections a session keeps.
	p := d.acquire()
	known, answered := d.eventsToken(w, r, peer, p.m)
	p.release()
	if answered {
		return
	}
	if !known {
		writeError(w, http.StatusForbidden, api.ErrForbidden, fmt.Sprintf("uid %d is not a principal of the manifest: it may not attach an MCP session", peer.UID))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.MCPUpgrade) {
		writeError(w, http.StatusBadRequest, api.ErrBadRequest, "POST "+api.PathMCP+" upgrades the connection: send Upgrade: "+api.MCPUpgrade+" (sluice mcp does)")
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		writeError(w, http.StatusInternalServerError, api.ErrInternal, "connection cannot be taken over")
		return
	}
	nc, _, err := hj.Hijack()
	if err != nil {
		return
	}
	token, _ := api.BearerToken(r.Header.Get("Authorization"))
	uc, _ := transport.UnixConn(nc)
	d.mcp.Attach(nc, uc, mcphost.Session{
		Task: req.Task, Token: token, PID: peer.PID, UID: peer.UID, GID: peer.GID,
		Bind:       func(ctx context.Context) context.Context { return transport.WithPeer(ctx, peer) },
		Log:        []any{"uid", peer.UID, "pid", peer.PID},
		PassRights: func(on bool) { transport.SetPassRights(nc, on) },
	})
}
