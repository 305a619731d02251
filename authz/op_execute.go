package authz

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// ExecArgs are an execute's args: {"argv"?}; Argv is nil when omitted
// (the tool's only command).
type ExecArgs struct {
	Argv []string
}

func (a *ExecArgs) Subject() string {
	if a.Argv == nil {
		return ""
	}
	return string(mustJSON(a.Argv))
}

// opExecute runs an argv that matches one of the tool's command patterns
// in a sandbox: args {"argv"?} (the only command, when it is literal and
// the call omits argv). See op_execute_pattern.go.
var opExecute = Op{
	Name:  api.OpExecute,
	Hints: api.ToolHints{},
	Keys: []string{"commands", "examples", "mounts", "cwd", "env", "timeout_ms", "memory_mb", "pids", "cpus",
		"seccomp", "pool", "pool_max", "max_open_files", "egress", "writes", "cache", "cache_mb"},
	// The one target is the argv: the arguments the commands' path
	// elements could match, resolved beneath each element's roots.
	Targets: []Target{{Name: "argv", Resolve: ResolveArgs}},
	when:    whenCommands,
	// Effects only with egress: without it a command reaches nothing
	// outside its sandbox; its mounts are read-only, and what it writes
	// stays in its scratch layer until a changeset's commit, which has a
	// durable record of its own.
	Effects:    true,
	effectFree: func(t *Tool) bool { return t.Egress == nil },
	Streams:    true,
	validate:   []validator{noRoots, validateCommands, validateMounts, validateCwdEnv, validateLimits, validateEgress, validateWrites, validateCache},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var ea api.ExecArgs
		if err := strictArgs(raw, &ea); err != nil {
			return err
		}
		a.Value = &ExecArgs{Argv: ea.Argv}
		a.Record = RecordArgs(mustJSON(ea))
		if len(ea.Argv) > 0 {
			// Over MaxArgsRecord the argv is kept by digest: keep which
			// program, and how many arguments, beside it.
			a.Record = withHint(a.Record, map[string]any{"argv0": ea.Argv[0], "argc": len(ea.Argv)})
		}
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ea api.ExecArgs
		if json.Unmarshal(rec, &ea) != nil {
			return false
		}
		a.Value = &ExecArgs{Argv: ea.Argv}
		return true
	},
	decide:   decideExecute,
	schema:   schemaExecute,
	describe: func(*Tool) string { return "Run one of the allowed commands in a sandbox." },
	// An approver sees the argv (the tool's only command when the call
	// gives none), quoted as a shell reads it back.
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		ea, ok := a.(*ExecArgs)
		if !ok {
			return
		}
		argv := ea.Argv
		if argv == nil {
			argv, _ = t.OnlyCommand()
		}
		ch.Argv = argv
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "run", Value: QuoteArgv(argv)})
	},
}

// QuoteArgv writes argv as a shell would read it back: each element that
// is not plainly safe in single quotes.
func QuoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func noRoots(key string, t *Tool) error {
	if len(t.Roots) > 0 {
		return merr(key+".roots", "applies to file tools; an execute tool uses \"mounts\"")
	}
	if t.Mode != "" || t.FileMode != "" {
		return merr(key+".mode", "applies only to write tools; remove it")
	}
	return nil
}

func validateMounts(key string, t *Tool) error {
	for i, mnt := range t.Mounts {
		if err := validateRel(mnt); err != nil {
			return merr(fmt.Sprintf("%s.mounts[%d]", key, i), "%q %v", mnt, err)
		}
	}
	return nil
}

func validateCwdEnv(key string, t *Tool) error {
	if t.Cwd != "" && !filepath.IsAbs(t.Cwd) {
		if err := validateRel(t.Cwd); err != nil {
			return merr(key+".cwd", "%q %v (or give an absolute path inside the container, such as /tmp)", t.Cwd, err)
		}
	}
	if strings.ContainsRune(t.Cwd, 0) {
		return merr(key+".cwd", "contains a NUL byte")
	}
	for _, k := range sortedKeys(t.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return merr(key+".env", "variable name %q is empty or contains '=' or NUL", k)
		}
		if strings.ContainsRune(t.Env[k], 0) {
			return merr(key+".env."+k, "value contains a NUL byte")
		}
	}
	return nil
}

func validateLimits(key string, t *Tool) error {
	if t.TimeoutMS < 0 || t.TimeoutMS > 3600_000 {
		return merr(key+".timeout_ms", "is %d; use 1 to 3600000 (default %d)", t.TimeoutMS, DefaultTimeoutMS)
	}
	if t.MemoryMB < 0 || (t.MemoryMB > 0 && t.MemoryMB < 8) || t.MemoryMB > 1<<20 {
		return merr(key+".memory_mb", "is %d; use 8 to 1048576 (default %d)", t.MemoryMB, DefaultMemoryMB)
	}
	if t.Pids < 0 || (t.Pids > 0 && t.Pids < 2) || t.Pids > 1<<22 {
		return merr(key+".pids", "is %d; use 2 to 4194304 (default %d)", t.Pids, DefaultPids)
	}
	if t.CPUs < 0 || t.CPUs > 1024 {
		return merr(key+".cpus", "is %g; use a positive number of CPUs such as 0.5 or 2", t.CPUs)
	}
	if strings.ContainsRune(t.Seccomp, 0) {
		return merr(key+".seccomp", "contains a NUL byte")
	}
	if t.Pool != nil && (*t.Pool < 0 || *t.Pool > 64) {
		return merr(key+".pool", "is %d; use 0 (always cold start) to 64 (default %d)", *t.Pool, DefaultPool)
	}
	if t.PoolMax != nil && (*t.PoolMax < t.EffectivePool() || *t.PoolMax > maxPool) {
		return merr(key+".pool_max", "is %d; use pool (%d: never grow) to %d (default twice pool)", *t.PoolMax, t.EffectivePool(), maxPool)
	}
	if t.MaxOpenFiles < 0 || (t.MaxOpenFiles > 0 && t.MaxOpenFiles < 16) || t.MaxOpenFiles > maxMaxOpenFiles {
		return merr(key+".max_open_files", "is %d; use 16 to %d files one container may hold open through its view (default %d)",
			t.MaxOpenFiles, maxMaxOpenFiles, DefaultMaxOpenFiles)
	}
	return nil
}

// validateRel accepts a clean relative directory that stays beneath base.
