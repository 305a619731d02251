package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/strictjson"
)

// Command patterns (docs/manifest.md, "Command patterns"): each entry of
// an execute tool's commands is a list of elements matched in order
// against a call's argv. A string matches itself; an object matches one
// argument by its one key (one_of, glob, regex, path, any), or, last
// only, the rest of the arguments (rest). The first entry that matches
// decides, and is the decision's rule.
//
// A path element needs the kernel: which file an argument names depends
// on the file system. Decide stays pure: the daemon resolves, for the
// entries that could match by their strings, each argument a path element
// could match beneath the element's roots (ArgPaths, then openat2 beneath
// the root's held fd) and passes the outcomes in as the request's one
// target, "argv" (ResolveArgs); the decision record keeps them, and
// replay re-decides from them.

// CommandArg is one element of a command pattern, as the manifest writes
// it: a string (Lit), or an object of exactly one key.
type CommandArg struct {
	Lit   string      `json:"-" toml:"-"`
	OneOf []string    `json:"one_of,omitempty" toml:"one_of"`
	Glob  *string     `json:"glob,omitempty" toml:"glob"`
	Regex *string     `json:"regex,omitempty" toml:"regex"`
	Path  []string    `json:"path,omitempty" toml:"path"`
	Any   *bool       `json:"any,omitempty" toml:"any"`
	Rest  *CommandArg `json:"rest,omitempty" toml:"rest"`

	obj  bool     // written as an object
	keys []string // the object's keys, in order
	bad  string   // what is wrong with the element's JSON ("" if nothing)
}

// cmdArgType is CommandArg's type, for strictjson.CheckKeys.
var cmdArgType = reflect.TypeOf(CommandArg{})

// Arg is a literal element (tests, tools built by hand).
func Arg(s string) CommandArg { return CommandArg{Lit: s} }

// Literal is a command of literal elements.
func Literal(argv ...string) []CommandArg {
	out := make([]CommandArg, len(argv))
	for i, a := range argv {
		out[i] = Arg(a)
	}
	return out
}

// IsLiteral reports whether the element is a string.
func (c *CommandArg) IsLiteral() bool { return !c.isObj() }

// isObj reports whether the element is an object: written as one, or
// built with one of its keys.
func (c *CommandArg) isObj() bool {
	return c.obj || c.OneOf != nil || c.Glob != nil || c.Regex != nil || c.Path != nil || c.Any != nil || c.Rest != nil
}

// UnmarshalJSON reads a string or an object. What does not fit is kept
// as c.bad for validateCommands, which names the element
// (tools.NAME.commands[i][j]); only malformed JSON is an error here.
func (c *CommandArg) UnmarshalJSON(b []byte) error {
	*c = CommandArg{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errors.New("empty command element")
	}
	switch b[0] {
	case '"':
		return json.Unmarshal(b, &c.Lit)
	case '{':
	default:
		c.bad = fmt.Sprintf("is JSON %s; an element is a string, or an object of one key such as {\"glob\": \"*.py\"}", jsonKind(b))
		return nil
	}
	c.obj = true
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if slices.Contains(c.keys, key) {
			c.setBad("%q is given twice; a key appears once", key)
			continue
		}
		c.keys = append(c.keys, key)
		var derr error
		switch key {
		case "one_of":
			derr = strictjson.Decode(raw, &c.OneOf)
		case "glob":
			derr = strictjson.Decode(raw, &c.Glob)
		case "regex":
			derr = strictjson.Decode(raw, &c.Regex)
		case "path":
			derr = strictjson.Decode(raw, &c.Path)
		case "any":
			derr = strictjson.Decode(raw, &c.Any)
		case "rest":
			c.Rest = new(CommandArg)
			derr = c.Rest.UnmarshalJSON(raw)
			if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
				c.Rest = nil
			}
		default:
			c.setBad("unknown key %q; use one of one_of, glob, regex, path, any, rest", key)
			continue
		}
		if derr != nil {
			c.setBad("%s: expected %s, got JSON %s", key, keyType(key), jsonKind(raw))
		}
	}
	return nil
}

func (c *CommandArg) setBad(format string, a ...any) {
	if c.bad == "" {
		c.bad = fmt.Sprintf(format, a...)
	}
}

func keyType(key string) string {
	switch key {
	case "one_of", "path":
		return "a list of strings"
	case "any":
		return "true"
	}
	return "a string"
}

// jsonKind names a JSON value's kind for messages, with short values
// shown.
func jsonKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	}
	if len(b) > 32 {
		return "value"
	}
	return string(b)
}

// MarshalJSON writes the element as the manifest does: a literal as a
// string, so that a manifest of literal commands keeps its canonical
// form and policy_version.
func (c CommandArg) MarshalJSON() ([]byte, error) {
	if !c.isObj() {
		return json.Marshal(c.Lit)
	}
	m := map[string]any{}
	switch {
	case c.OneOf != nil:
		m["one_of"] = c.OneOf
	case c.Glob != nil:
		m["glob"] = *c.Glob
	case c.Regex != nil:
		m["regex"] = *c.Regex
	case c.Path != nil:
		m["path"] = c.Path
	case c.Any != nil:
		m["any"] = *c.Any
	case c.Rest != nil:
		m["rest"] = c.Rest
	}
	return json.Marshal(m)
}

// String is the element as a reader sees it in a schema or a message.
func (c *CommandArg) String() string {
	switch {
	case !c.isObj():
		return QuoteArgv([]string{c.Lit})
	case c.OneOf != nil:
		return "{" + strings.Join(c.OneOf, "|") + "}"
	case c.Glob != nil:
		return "<glob " + *c.Glob + ">"
	case c.Regex != nil:
		return "<regex " + *c.Regex + ">"
	case c.Path != nil:
		return "<path beneath " + strings.Join(c.Path, " or ") + ">"
	case c.Any != nil:
		return "<any>"
	case c.Rest != nil:
		return "[" + c.Rest.String() + " ...]"
	}
	return "?"
}

// PatternString is a command pattern as a reader sees it.
func PatternString(p []CommandArg) string {
	out := make([]string, len(p))
	for i := range p {
		out[i] = p[i].String()
	}
	return strings.Join(out, " ")
}

// LiteralArgv is the command's argv when every element is a string.
func LiteralArgv(p []CommandArg) ([]string, bool) {
	out := make([]string, len(p))
	for i := range p {
		if p[i].isObj() {
			return nil, false
		}
		out[i] = p[i].Lit
	}
	return out, true
}

// OnlyCommand is the argv a call of t runs when it gives none: the
// tool's one command, when it is literal.
func (t *Tool) OnlyCommand() ([]string, bool) {
	if len(t.Commands) != 1 {
		return nil, false
	}
	return LiteralArgv(t.Commands[0])
}

// CommandExamples are argv lists checked against commands at load: each
// of Match must match an entry, none of NotMatch may.
type CommandExamples struct {
	Match    [][]string `json:"match,omitempty" toml:"match"`
	NotMatch [][]string `json:"not_match,omitempty" toml:"not_match"`
}

// Kinds of a compiled element.
const (
	argLit = iota
	argOneOf
	argGlob
	argRegex
	argPath
	argAny
)

// argMatcher is one element compiled: what one argument must be.
type argMatcher struct {
	kind  int
	s     string         // argLit; argGlob: the glob
	set   []string       // argOneOf
	re    *regexp.Regexp // argRegex, anchored
	roots []pathRoot     // argPath
}

type pathRoot struct {
	clean string   // as written, cleaned
	comps []string // its components
}

// cmdPattern is one entry of commands compiled.
type cmdPattern struct {
	args     []argMatcher
	rest     *argMatcher // nil: exactly len(args) arguments
	hasPaths bool        // some element is a path element
}

// compileArg compiles one validated single-argument element.
func compileArg(c *CommandArg) (argMatcher, error) {
	switch {
	case !c.isObj():
		return argMatcher{kind: argLit, s: c.Lit}, nil
	case c.OneOf != nil:
		return argMatcher{kind: argOneOf, set: c.OneOf}, nil
	case c.Glob != nil:
		return argMatcher{kind: argGlob, s: *c.Glob}, nil
	case c.Regex != nil:
		// RE2: linear in the argument, whatever the pattern. Anchored:
		// the whole argument must match, as a reader expects.
		re, err := regexp.Compile(`^(?:` + *c.Regex + `)$`)
		if err != nil {
			return argMatcher{}, err
		}
		return argMatcher{kind: argRegex, re: re}, nil
	case c.Path != nil:
		m := argMatcher{kind: argPath}
		for _, r := range c.Path {
			m.roots = append(m.roots, pathRoot{clean: path.Clean(r), comps: splitPath(r, nil)})
		}
		return m, nil
	case c.Any != nil:
		return argMatcher{kind: argAny}, nil
	}
	return argMatcher{}, errors.New("no key")
}

// compilePatterns compiles a tool's validated commands.
func compilePatterns(t *Tool) []cmdPattern {
	out := make([]cmdPattern, 0, len(t.Commands))
	for _, entry := range t.Commands {
		p, err := compilePattern(entry)
		if err != nil {
			// Parse validated every entry: one that does not compile
			// (a tool built by hand) matches nothing.
			p = cmdPattern{rest: &argMatcher{kind: -1}, args: []argMatcher{{kind: -1}}}
		}
		out = append(out, p)
	}
	return out
}

func compilePattern(entry []CommandArg) (cmdPattern, error) {
	var p cmdPattern
	for j := range entry {
		c := &entry[j]
		if c.Rest != nil {
			if j != len(entry)-1 || j == 0 {
				return p, errors.New("rest is last, after the program")
			}
			m, err := compileArg(c.Rest)
			if err != nil {
				return p, err
			}
			p.rest = &m
			p.hasPaths = p.hasPaths || m.kind == argPath
			continue
		}
		m, err := compileArg(c)
		if err != nil {
			return p, err
		}
		p.args = append(p.args, m)
		p.hasPaths = p.hasPaths || m.kind == argPath
	}
	return p, nil
}

// matchString reports whether arg matches an element other than a path
// element, which needs the kernel (path: true when its lexical shape is
// sound; pathFn decides).
func (m *argMatcher) matchString(arg string) bool {
	switch m.kind {
	case argLit:
		return arg == m.s
	case argOneOf:
		return slices.Contains(m.set, arg)
	case argGlob:
		ok, _ := path.Match(m.s, arg)
		return ok
	case argRegex:
		return m.re.MatchString(arg)
	case argPath:
		return argPathShape(arg)
	case argAny:
		return true
	}
	return false
}

// pathFn answers whether argv[k] names a path beneath one of the roots of
// path element m, as the caller knows it (the kernel's resolutions;
// lexically, for examples).
type pathFn func(k int, arg string, m *argMatcher) bool

// match reports whether argv matches p: the strings first, then, only
// for an entry that matches by its strings, each path element by pathOK.
func (p *cmdPattern) match(argv []string, pathOK pathFn) bool {
	n := len(p.args)
	if len(argv) == 0 || n == 0 || len(argv) < n || p.rest == nil && len(argv) != n {
		return false
	}
	for k := range argv {
		if !p.at(k).matchString(argv[k]) {
			return false
		}
	}
	if !p.hasPaths {
		return true
	}
	for k := range argv {
		if m := p.at(k); m.kind == argPath && !pathOK(k, argv[k], m) {
			return false
		}
	}
	return true
}

// at is the element argument k must match (k < len(args), or rest).
func (p *cmdPattern) at(k int) *argMatcher {
	if k < len(p.args) {
		return &p.args[k]
	}
	return p.rest
}

// argPathShape is the lexical check of an argument a path element may
// match: not empty, no NUL, no longer than the kernel takes.
func argPathShape(arg string) bool {
	if arg == "" || len(arg) > MaxPathBytes || strings.IndexByte(arg, 0) >= 0 {
		return false
	}
	for c := range strings.SplitSeq(arg, "/") {
		if len(c) > MaxComponentBytes {
			return false
		}
	}
	return true
}

// MaxArgPaths bounds the path resolutions one call asks of the kernel:
// a call whose argv would need more has the ones beyond unresolved, and
// the entries that needed them do not match (fail closed).
const MaxArgPaths = 64

// ArgPath is one resolution a path element asks for: argument Arg
// beneath the element's root Root (as written, cleaned), Rel the rest of
// the path beneath it, for the kernel ("." for the root itself).
type ArgPath struct {
	Arg  int
	Root string
	Rel  string
}

// ArgPaths lists, for the entries of t's commands that argv matches by
// their strings, each argument a path element could match beneath one of
// the element's roots, lexically: what the daemon resolves with openat2
// beneath each root's held fd, in order, at most MaxArgPaths. base is base
// as the kernel names it, cwd the command's working directory as the
// container sees it (mounts appear at their host paths): a relative
// argument is resolved against it, as the command will. An argument
// never-listed as written is not resolved (the kernel is not asked).
func ArgPaths(t *Tool, argv []string, base, cwd string) []ArgPath {
	ix := t.index()
	var out []ArgPath
	for pi := range ix.patterns {
		p := &ix.patterns[pi]
		if !p.hasPaths {
			continue
		}
		var want []ArgPath
		p.match(argv, func(k int, arg string, m *argMatcher) bool {
			rest, ok := argBaseComps(arg, base, cwd)
			if !ok {
				return false
			}
			any := false
			for _, r := range m.roots {
				rel, ok := beneath(rest, r.comps)
				if !ok {
					continue
				}
				if _, hit := neverMatchComps(ix.never, rel); hit {
					continue
				}
				any = true
				want = append(want, ArgPath{Arg: k, Root: r.clean, Rel: joinComps(rel)})
			}
			return any
		})
		for _, w := range want {
			if !slices.ContainsFunc(out, func(o ArgPath) bool { return o.Arg == w.Arg && o.Root == w.Root }) {
				if len(out) == MaxArgPaths {
					return out
				}
				out = append(out, w)
			}
		}
	}
	return out
}

// argBaseComps is an argument as a path relative to base, as components:
// an absolute one beneath base as the kernel names it, a relative one
// joined to cwd first. ".." is kept for the kernel; a path that reaches
// base only through ".." is not beneath it.
func argBaseComps(arg, base, cwd string) ([]string, bool) {
	if !argPathShape(arg) {
		return nil, false
	}
	p := arg
	if !path.IsAbs(p) {
		if !path.IsAbs(cwd) {
			return nil, false
		}
		p = cwd + "/" + arg
	}
	comps := splitPath(p, nil)
	bc := splitPath(base, nil)
	if len(bc) > len(comps) || !equalPrefix(bc, comps) || slices.Contains(bc, "..") {
		return nil, false
	}
	return comps[len(bc):], true
}

// beneath is the part of comps below root's, when comps lie beneath it
// and do not climb above it by their ".." alone.
func beneath(comps, root []string) ([]string, bool) {
	if len(root) > len(comps) || !equalPrefix(root, comps) {
		return nil, false
	}
	rest := comps[len(root):]
	if climbs(rest) {
		return nil, false
	}
	return rest, true
}

func joinComps(comps []string) string {
	if len(comps) == 0 {
		return "."
	}
	return strings.Join(comps, "/")
}

// decideExecute decides an execute call: the first entry of commands
// that argv matches, its path elements by the kernel's resolutions
// (req's one target); else command_not_allowed.
func decideExecute(t *Tool, ix *toolIndex, req *Request) Decision {
	ea, ok := argsOf[ExecArgs](req)
	if !ok {
		return deny(api.ReasonInternalError, ix.key)
	}
	argv := ea.Argv
	if argv == nil {
		only, ok := t.OnlyCommand()
		if !ok {
			return deny(api.ReasonInvalidArgs, ix.key+".commands")
		}
		argv = only
	}
	resolved := req.target(0)
	pathOK := func(k int, _ string, m *argMatcher) bool {
		for i := range resolved {
			res := &resolved[i]
			if res.Arg != k || res.Outcome != OutcomeOK || res.Kind != KindFile && res.Kind != KindDir {
				continue
			}
			if !slices.ContainsFunc(m.roots, func(r pathRoot) bool { return r.clean == path.Clean(res.RootPath) }) {
				continue
			}
			// never, on what the kernel resolved: a symlink named
			// innocently may lead to .env (the view hides it anyway).
			if _, hit := neverMatch(ix.never, res.Rel); hit {
				continue
			}
			return true
		}
		return false
	}
	for i := range ix.patterns {
		if ix.patterns[i].match(argv, pathOK) {
			return allow(ix.commandKeys[i])
		}
	}
	return deny(api.ReasonCommandNotAllowed, ix.key+".commands")
}

// validateCommands checks each entry of commands: literal strings, one
// key per object, rest last, regexes that compile, path roots beneath
// base. Errors name tools.NAME.commands[i][j].
func validateCommands(key string, t *Tool) error {
	if len(t.Commands) == 0 {
		return merr(key+".commands", "missing; list the allowed argv arrays, e.g. [[\"python3\",\"-m\",\"unittest\"]]")
	}
	for i, entry := range t.Commands {
		k := fmt.Sprintf("%s.commands[%d]", key, i)
		if len(entry) == 0 {
			return merr(k, "is empty; an argv needs at least the program")
		}
		for j := range entry {
			ek := fmt.Sprintf("%s[%d]", k, j)
			c := &entry[j]
			if c.bad == "" && len(c.keys) == 1 && c.keys[0] == "rest" {
				switch {
				case c.Rest == nil:
					return merr(ek, "rest is null; give one element, such as {\"rest\": {\"any\": true}}")
				case j != len(entry)-1:
					return merr(ek, "rest must be the last element")
				case j == 0:
					return merr(ek, "rest cannot be the program; give the program first")
				case c.Rest.bad == "" && c.Rest.isObj() && (c.Rest.Rest != nil || slices.Contains(c.Rest.keys, "rest")):
					return merr(ek, "rest: a rest inside rest; give one element, such as {\"any\": true}")
				}
				if msg := checkElement(c.Rest); msg != "" {
					return merr(ek, "rest: %s", msg)
				}
				continue
			}
			if msg := checkElement(c); msg != "" {
				return merr(ek, "%s", msg)
			}
		}
		if entry[0].IsLiteral() && entry[0].Lit == "" {
			return merr(k+"[0]", "the program is empty")
		}
	}
	return nil
}

// checkElement checks one single-argument element; "" when sound.
func checkElement(c *CommandArg) string {
	if c.bad != "" {
		return c.bad
	}
	if !c.obj {
		if strings.ContainsRune(c.Lit, 0) {
			return "contains a NUL byte"
		}
		return ""
	}
	if len(c.keys) != 1 {
		if len(c.keys) == 0 {
			return "is an empty object; give one key: one_of, glob, regex, path, any or rest"
		}
		keys := slices.Sorted(slices.Values(c.keys))
		return fmt.Sprintf("has %d keys (%s); an element is one of one_of, glob, regex, path, any, rest", len(keys), strings.Join(keys, ", "))
	}
	switch c.keys[0] {
	case "one_of":
		if len(c.OneOf) == 0 {
			return "one_of is empty; list the strings the argument may be"
		}
		for _, s := range c.OneOf {
			if strings.ContainsRune(s, 0) {
				return "one_of: a string contains a NUL byte"
			}
		}
	case "glob":
		if c.Glob == nil || *c.Glob == "" || strings.ContainsRune(*c.Glob, 0) {
			return "glob is empty or contains a NUL byte"
		}
		if _, err := path.Match(*c.Glob, ""); err != nil {
			return fmt.Sprintf("glob %q: %v", *c.Glob, err)
		}
	case "regex":
		if c.Regex == nil {
			return "regex is null; give an RE2 regular expression"
		}
		if _, err := regexp.Compile(*c.Regex); err != nil {
			return fmt.Sprintf("regex %q does not compile (RE2 syntax): %v", *c.Regex, err)
		}
		if _, err := regexp.Compile(`^(?:` + *c.Regex + `)$`); err != nil {
			return fmt.Sprintf("regex %q cannot be anchored: %v", *c.Regex, err)
		}
	case "path":
		if len(c.Path) == 0 {
			return "path is empty; list the directories (relative to base) the argument must lie beneath"
		}
		for k, r := range c.Path {
			if err := validateRel(r); err != nil {
				return fmt.Sprintf("path[%d] %q %v", k, r, err)
			}
		}
	case "any":
		if c.Any == nil || !*c.Any {
			return "any is only ever true: {\"any\": true}"
		}
	case "rest":
		return "a rest inside rest; give one element, such as {\"any\": true}"
	}
	return ""
}

// refineCommandKeyError is a key error inside an element of a tool's
// commands (strictjson names it tools.NAME.commands[][].KEY) named by
// its element, tools.NAME.commands[i][j], as every other fault of a
// pattern is; nil when err is not one.
func refineCommandKeyError(data []byte, ke *strictjson.KeyError) error {
	const mid = ".commands[][]"
	name, after, ok := strings.Cut(strings.TrimPrefix(ke.Path, "tools."), mid)
	if !ok || !strings.HasPrefix(ke.Path, "tools.") {
		return nil
	}
	var doc struct {
		Tools map[string]struct {
			Commands [][]json.RawMessage `json:"commands"`
		} `json:"tools"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return nil
	}
	for i, entry := range doc.Tools[name].Commands {
		for j, raw := range entry {
			if strictjson.CheckKeys(raw, cmdArgType) == nil {
				continue
			}
			k := fmt.Sprintf("tools.%s.commands[%d][%d]", name, i, j)
			what := strings.TrimPrefix(after, ".")
			if ke.Msg == strictjson.MsgRepeated {
				return merr(k, "%q is given twice; a key appears once", what)
			}
			return merr(k, "unknown key %q; an element is a string, or an object of one of one_of, glob, regex, path, any, rest", what)
		}
	}
	return nil
}

// checkExamples checks each tool's examples against its commands, path
// elements lexically (an argument beneath one of the element's roots, as
// written; the kernel's check comes at each call): each of match must
// match an entry, none of not_match may. Errors name the example.
func checkExamples(m *Manifest) error {
	for _, name := range sortedKeys(m.Tools) {
		t := m.Tools[name]
		if t.Examples == nil {
			continue
		}
		key := "tools." + name + ".examples"
		ix := t.index()
		cwd := lexicalCwd(t, m.BaseDir)
		lexical := func(k int, arg string, el *argMatcher) bool {
			rest, ok := argBaseComps(arg, m.BaseDir, cwd)
			if !ok {
				return false
			}
			for _, r := range el.roots {
				if rel, ok := beneath(rest, r.comps); ok {
					if _, hit := neverMatchComps(ix.never, rel); !hit {
						return true
					}
				}
			}
			return false
		}
		first := func(argv []string) int {
			for i := range ix.patterns {
				if ix.patterns[i].match(argv, lexical) {
					return i
				}
			}
			return -1
		}
		for _, set := range []struct {
			name string
			list [][]string
			want bool
		}{{"match", t.Examples.Match, true}, {"not_match", t.Examples.NotMatch, false}} {
			for i, argv := range set.list {
				k := key + "." + set.name + "[" + strconv.Itoa(i) + "]"
				if len(argv) == 0 {
					return merr(k, "is empty; an example is an argv list")
				}
				switch e := first(argv); {
				case set.want && e < 0:
					return merr(k, "%s matches no entry of commands", QuoteArgv(argv))
				case !set.want && e >= 0:
					return merr(k, "%s matches commands[%d] (%s)", QuoteArgv(argv), e, PatternString(t.Commands[e]))
				}
			}
		}
	}
	return nil
}

// lexicalCwd is the command's working directory as the manifest says it
// (the daemon's is the kernel's: its first mount as the kernel names it).
func lexicalCwd(t *Tool, baseDir string) string {
	switch {
	case path.IsAbs(t.Cwd):
		return path.Clean(t.Cwd)
	case t.Cwd != "":
		return path.Join(baseDir, t.Cwd)
	case len(t.Mounts) > 0:
		return path.Join(baseDir, t.Mounts[0])
	}
	return "/tmp"
}

// schemaExecute is an execute tool's args schema: the allowed argv lists
// as an enum when every entry is literal, else the patterns described.
func schemaExecute(t *Tool) map[string]any {
	argv := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	literal := make([][]string, 0, len(t.Commands))
	for _, c := range t.Commands {
		if l, ok := LiteralArgv(c); ok {
			literal = append(literal, l)
		}
	}
	if len(literal) == len(t.Commands) {
		argv["enum"] = literal
		argv["description"] = "One of the allowed command lines, exactly."
	} else {
		shown := make([]string, len(t.Commands))
		for i, c := range t.Commands {
			shown[i] = PatternString(c)
		}
		argv["description"] = "An argv matching one of: " + strings.Join(shown, "; ") +
			". A <path beneath …> argument is absolute, or relative to the command's working directory, and must resolve beneath one of those directories."
	}
	s := map[string]any{
		"type": "object", "additionalProperties": false,
		"properties": map[string]any{"argv": argv},
	}
	if _, ok := t.OnlyCommand(); !ok {
		s["required"] = []string{"argv"}
	}
	return s
}
