package authz

import (
	"fmt"

	"github.com/sluicehq/sluice/api"
)

// ArgsDetail is what a caller is told of an invalid_args decision d of
// req on tool t, beyond the reason code: the args' fault (req.ArgsError),
// or, for a command called without argv when the tool has no one literal
// command to run, that argv is required and where the patterns are. ""
// when there is nothing to add.
func ArgsDetail(t *Tool, req *Request, d Decision) string {
	if d.Reason != api.ReasonInvalidArgs {
		return ""
	}
	if req.ArgsError != "" {
		return req.ArgsError
	}
	if t == nil || t.Operation != api.OpExecute {
		return ""
	}
	if ea, ok := req.Args.(*ExecArgs); ok && ea.Argv == nil {
		if _, only := t.OnlyCommand(); !only {
			n := len(t.Commands)
			patterns := "command patterns"
			if n == 1 {
				patterns = "command pattern, not a literal argv"
			}
			return fmt.Sprintf("argv is required: this tool has %d %s; see sluice tools --json", n, patterns)
		}
	}
	return ""
}
