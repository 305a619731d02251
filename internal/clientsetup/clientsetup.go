// Package clientsetup knows where each MCP client (Claude Code, Codex
// CLI, Gemini CLI, Cursor, VS Code) keeps its MCP servers and how to turn
// off its own file, shell and web tools, by the names of the version
// they were checked at. It plans the edits to those files (merging into
// what the user has) and applies them: parse, set, write to a temporary
// file and rename, keeping a .bak of the original once. `sluice client
// setup` and `sluice client check` (cmd/sluice/cli/client.go) are its
// only users. docs/clients.md is the reference for users.
package clientsetup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// Scope is where a client's entry goes: the user's own config, or the
// project's (checked in, shared with the team).
type Scope string

const (
	ScopeUser    Scope = "user"
	ScopeProject Scope = "project"
)

// Options say what to write and where.
type Options struct {
	Scope   Scope  // "" = the client's default
	Home    string // the user's home directory
	Dir     string // the project directory (absolute)
	Command string // the sluice binary, as the client should start it
	Socket  string // sluiced's socket, passed as --socket
}

// Entry is the MCP server entry every client gets: `sluice mcp --socket
// PATH`, the socket in the args because Codex and the MCP Inspector pass
// no environment to MCP servers.
func (o Options) Args() []string { return []string{"mcp", "--socket", o.Socket} }

// ServerName is the name of sluice's entry in every client.
const ServerName = "sluice"

// format of a config file.
type format int

const (
	formatJSON format = iota
	formatTOML
	formatWhole // a file sluice owns whole (Gemini's policy file)
)

// fileEdit is one file and what to set in it.
type fileEdit struct {
	path   string
	format format
	edit   func(doc map[string]any) // JSON/TOML: set sluice's keys
	whole  []byte                   // formatWhole: the file's content
}

// Change is one file a setup writes: its content before (nil: it does
// not exist) and after. Unchanged files are not Changes.
type Change struct {
	Path string
	Old  []byte
	New  []byte
	mode os.FileMode
}

// Plan is what a setup would write and what the user is told.
type Plan struct {
	Client    *Client
	Scope     Scope
	Changes   []Change
	Unchanged []string // files that already say what setup would write
	Disabled  []string // the client's own tools turned off (or made to ask)
	Manual    []string // what the user must do by hand
}

// Client is one MCP client's knowledge.
type Client struct {
	Name         string
	Title        string
	Checked      string // the version the names below were checked at
	DefaultScope Scope
	Scopes       []Scope
	// files are the files setup writes for o.
	files func(o Options) []fileEdit
	// disabled are the client's own tools turned off, as told to the user.
	disabled []string
	// manual are the steps left to the user for o.
	manual func(o Options) []string
	// ServerFiles are the files, most specific first, where the client
	// looks for sluice's entry (sluice client check reads it back).
	ServerFiles func(o Options) []string
	// entry reads sluice's entry (command, args) from a parsed ServerFile.
	entry func(doc map[string]any) (string, []string, bool)
}

// Clients, by name.
var Clients = map[string]*Client{}

// Names are the clients' names, sorted.
func Names() []string {
	var out []string
	for n := range Clients {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func register(c *Client) { Clients[c.Name] = c }

// Setup plans the writes for client c; nothing is written (Apply does).
func (c *Client) Setup(o Options) (*Plan, error) {
	if o.Scope == "" {
		o.Scope = c.DefaultScope
	}
	if !slices.Contains(c.Scopes, o.Scope) {
		return nil, fmt.Errorf("%s has no %q scope (it has %s)", c.Title, o.Scope, joinScopes(c.Scopes))
	}
	p := &Plan{Client: c, Scope: o.Scope, Disabled: c.disabled}
	if c.manual != nil {
		p.Manual = c.manual(o)
	}
	for _, f := range c.files(o) {
		ch, err := plan(f, o.Home)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(ch.Old, ch.New) {
			p.Unchanged = append(p.Unchanged, f.path)
			continue
		}
		p.Changes = append(p.Changes, ch)
	}
	return p, nil
}

func joinScopes(s []Scope) string {
	var out []string
	for _, x := range s {
		out = append(out, string(x))
	}
	return strings.Join(out, ", ")
}

// plan reads f's file and computes its new content.
func plan(f fileEdit, home string) (Change, error) {
	ch := Change{Path: f.path, mode: 0o644}
	if home != "" && strings.HasPrefix(f.path, home+string(filepath.Separator)) {
		ch.mode = 0o600 // the user's own config: not for other users
	}
	old, err := os.ReadFile(f.path)
	switch {
	case err == nil:
		ch.Old = old
		if st, err := os.Stat(f.path); err == nil {
			ch.mode = st.Mode().Perm()
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return ch, err
	}
	switch f.format {
	case formatWhole:
		ch.New = f.whole
	case formatJSON:
		doc, err := parseJSON(f.path, old)
		if err != nil {
			return ch, err
		}
		before, _ := parseJSON(f.path, old)
		f.edit(doc)
		if old != nil && reflect.DeepEqual(before, doc) {
			ch.New = old // already says it: left as the user wrote it
			break
		}
		out, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return ch, err
		}
		ch.New = append(out, '\n')
	case formatTOML:
		doc, err := parseTOML(f.path, old)
		if err != nil {
			return ch, err
		}
		before, _ := parseTOML(f.path, old)
		f.edit(doc)
		if old != nil && reflect.DeepEqual(before, doc) {
			ch.New = old
			break
		}
		out, err := toml.Marshal(doc)
		if err != nil {
			return ch, err
		}
		ch.New = out
	}
	return ch, nil
}

// ReadDoc parses a client's config file (JSON or TOML by its name).
func ReadDoc(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".toml") {
		return parseTOML(path, raw)
	}
	return parseJSON(path, raw)
}

// parseJSON parses a JSON object, refusing anything else with the file,
// line and column of the fault. An empty file is an empty object.
func parseJSON(path string, raw []byte) (map[string]any, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep the user's numbers as written
	if err := dec.Decode(&doc); err != nil {
		off := dec.InputOffset()
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			off = max(se.Offset-1, 0) // the offset is past the offending byte
		case errors.As(err, &te):
			off = te.Offset
			err = fmt.Errorf("want a JSON object, found %s", te.Value)
		}
		line, col := lineCol(raw, off)
		return nil, fmt.Errorf("%s:%d:%d: %v; not changed (fix or move it, then run again)", path, line, col, err)
	}
	if dec.More() {
		line, col := lineCol(raw, dec.InputOffset())
		return nil, fmt.Errorf("%s:%d:%d: text after the JSON object; not changed (fix or move it, then run again)", path, line, col)
	}
	return doc, nil
}

func lineCol(raw []byte, off int64) (int, int) {
	if off > int64(len(raw)) {
		off = int64(len(raw))
	}
	before := raw[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

func parseTOML(path string, raw []byte) (map[string]any, error) {
	doc := map[string]any{}
	if err := toml.Unmarshal(raw, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			return nil, fmt.Errorf("%s:%d:%d: %v; not changed (fix or move it, then run again)", path, line, col, de.Error())
		}
		return nil, fmt.Errorf("%s: %v; not changed (fix or move it, then run again)", path, err)
	}
	return doc, nil
}

// Apply writes p's changes: each to a temporary file beside it, renamed
// over it; the original kept once as FILE.bak.
func (p *Plan) Apply() error {
	for _, ch := range p.Changes {
		if err := os.MkdirAll(filepath.Dir(ch.Path), 0o755); err != nil {
			return err
		}
		if ch.Old != nil {
			bak := ch.Path + ".bak"
			if _, err := os.Lstat(bak); errors.Is(err, os.ErrNotExist) {
				if err := writeAtomic(bak, ch.Old, ch.mode); err != nil {
					return err
				}
			}
		}
		if err := writeAtomic(ch.Path, ch.New, ch.mode); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic replaces path with data whole (atomicfile.Write).
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode, true)
}

// Entry reads sluice's entry back from the first of c's ServerFiles that
// has one: the command and args the client starts.
func (c *Client) Entry(o Options) (file, command string, args []string, err error) {
	var tried []string
	for _, f := range c.ServerFiles(o) {
		doc, err := ReadDoc(f)
		if errors.Is(err, os.ErrNotExist) {
			tried = append(tried, f)
			continue
		}
		if err != nil {
			return f, "", nil, err
		}
		if cmd, args, ok := c.entry(doc); ok {
			return f, cmd, args, nil
		}
		tried = append(tried, f)
	}
	return "", "", nil, fmt.Errorf("no %q MCP server in %s", ServerName, strings.Join(tried, ", "))
}

// helpers on parsed documents

// obj is doc[key] as an object, created if missing or not an object.
func obj(doc map[string]any, key string) map[string]any {
	if m, ok := doc[key].(map[string]any); ok {
		return m
	}
	m := map[string]any{}
	doc[key] = m
	return m
}

// addStrings appends what is missing of add to the string list doc[key].
func addStrings(doc map[string]any, key string, add []string) {
	var have []any
	if l, ok := doc[key].([]any); ok {
		have = l
	}
	for _, s := range add {
		if !slices.ContainsFunc(have, func(v any) bool { return v == s }) {
			have = append(have, s)
		}
	}
	doc[key] = have
}

// removeStrings drops drop from the string list doc[key], if any.
func removeStrings(doc map[string]any, key string, drop []string) {
	l, ok := doc[key].([]any)
	if !ok {
		return
	}
	doc[key] = slices.DeleteFunc(slices.Clone(l), func(v any) bool {
		s, _ := v.(string)
		return slices.Contains(drop, s)
	})
}

func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// serverEntry reads doc[table][sluice] as {command, args}.
func serverEntry(table string) func(doc map[string]any) (string, []string, bool) {
	return func(doc map[string]any) (string, []string, bool) {
		t, _ := doc[table].(map[string]any)
		e, _ := t[ServerName].(map[string]any)
		cmd, _ := e["command"].(string)
		args, ok := stringList(e["args"])
		if cmd == "" || (!ok && e["args"] != nil) {
			return "", nil, false
		}
		return cmd, args, true
	}
}

func strAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
