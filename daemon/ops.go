//go:build linux

package daemon

import (
	"context"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/daemon/policyfiles"
)

// opSpec is the daemon's half of one operation (docs/design.md, "One
// operation, one unit"), in its daemon/op_NAME.go: its executor, which
// returns the outcome with the operation's own typed result (opResult),
// and what it readies at load, starts early, adds to an approval, or
// leaves for recovery; beside the pure half it embeds (authz.Op: keys,
// its typed args, the targets it resolves, whether it has effects or
// streams, its decision, schema and description). Resolving is resolve's,
// over the targets authz.Op.Targets lists.
type opSpec struct {
	*authz.Op
	exec func(c *call, onChunk func(stream string, data []byte)) *outcome
	// prepare, when set, starts work that has no effect (execute: making
	// a cold container) while an allowed call's decision is made durable;
	// exec picks it up.
	prepare func(c *call)
	// show, when set, adds to what an approver is shown of a parked call
	// (authz.Op.Approval, from its args) what needs the kernel or the
	// parked body: a write's diff, a delete's file, a post's body.
	show func(ctx context.Context, d *Daemon, p *policy, pk *parked, ch *api.ApprovalChange)
	// load, when set, readies a tool of the operation when the manifest
	// loads (execute: its mounts resolved to fds, its spec and pool).
	load func(p *policy, name string, t *authz.Tool, files *policyfiles.Files) error
	// loaded, when set, checks a tool once every tool has loaded, for
	// what needs the whole policy (execute: no mount reaches a credential
	// value file another tool read).
	loaded func(p *policy, name string, files *policyfiles.Files) error
	// tempName, when set, is the temp name the operation's commit of
	// call id leaves beside each target it resolved (write): start-up
	// recovery removes those a crash left (recover.go).
	tempName func(callID string) string
}

var operations = map[api.Operation]*opSpec{
	api.OpRead:   {exec: execRead},
	api.OpList:   {exec: execList},
	api.OpStat:   {exec: execStat},
	api.OpSearch: {exec: execSearch},
	api.OpWrite:  {exec: execWrite, show: showWriteNow, tempName: writeTempName},
	api.OpEdit:   {exec: execEdit, show: showEditNow, tempName: writeTempName},
	api.OpMove:   {exec: execMove, show: showFileNow},
	api.OpMkdir:  {exec: execMkdir},
	api.OpDelete: {exec: execDelete, show: showFileNow},
	api.OpExecute: {
		exec: func(c *call, onChunk func(string, []byte)) *outcome {
			return c.changesetAfter(c.p.exec[c.req.Tool], c.runExec(onChunk))
		},
		prepare: (*call).startCold,
		load:    loadExec,
		loaded:  checkExecMounts,
	},
	api.OpFetch: {exec: execFetch, load: loadNet},
	api.OpPost:  {exec: execPost, show: showBodyNow, load: loadNet},
}

func init() {
	for name, o := range operations {
		if o.Op = authz.LookupOp(name); o.Op == nil {
			panic("daemon: no authz operation " + string(name))
		}
	}
}
