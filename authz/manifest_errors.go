package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Errors that name the fix (docs/manifest.md, "Errors"): every load error
// names the key path in full (tools.run_tests.timeout_ms), says in the
// manifest's words what the key takes (never a Go type), and, from a
// file, where: the line and column of the offending value.

// positioned adds to a ManifestError the byte offset of what it is
// about in the JSON document data, where known: the key's own offset
// (an unknown or repeated key), the value's (a type error), or else the
// value at its key path, or at the nearest enclosing one the document
// spells. The line and column are computed from it.
func positioned(err error, data []byte) error {
	var me *ManifestError
	if !errors.As(err, &me) || me.Line > 0 {
		return err
	}
	off := me.at - 1
	if off < 0 && me.Key != "" {
		off = jsonOffsetOf(data, me.Key)
	}
	if off < 0 || off > len(data) {
		return err
	}
	out := *me
	out.Line, out.Col = lineCol(data, off)
	return &out
}

// lineCol is the 1-based line and column (in characters) of byte off.
func lineCol(data []byte, off int) (line, col int) {
	line, start := 1, 0
	for i := 0; i < off && i < len(data); i++ {
		if data[i] == '\n' {
			line++
			start = i + 1
		}
	}
	return line, utf8.RuneCount(data[start:min(off, len(data))]) + 1
}

// jsonValue is one value of a JSON document: its key path as manifest
// errors spell it (tools.r.roots[1]) and its bytes [start, end).
type jsonValue struct {
	path       string
	start, end int
}

// jsonValues lists every value of data, valid JSON, outermost first.
func jsonValues(data []byte) []jsonValue {
	var out []jsonValue
	w := jsonWalker{data: data}
	w.value("", &out)
	return out
}

type jsonWalker struct {
	data []byte
	i    int
}

func (w *jsonWalker) space() {
	for w.i < len(w.data) && strings.IndexByte(" \t\r\n", w.data[w.i]) >= 0 {
		w.i++
	}
}

func (w *jsonWalker) value(path string, out *[]jsonValue) {
	w.space()
	if w.i >= len(w.data) {
		return
	}
	n := len(*out)
	*out = append(*out, jsonValue{path: path, start: w.i})
	switch w.data[w.i] {
	case '{':
		w.i++
		for {
			w.space()
			if w.i >= len(w.data) || w.data[w.i] == '}' {
				w.i++
				break
			}
			if w.data[w.i] == ',' {
				w.i++
				continue
			}
			start := w.i
			w.str()
			var key string
			if json.Unmarshal(w.data[start:w.i], &key) != nil {
				key = string(w.data[start:w.i])
			}
			w.space()
			w.i++ // :
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			w.value(sub, out)
		}
	case '[':
		w.i++
		for k := 0; ; {
			w.space()
			if w.i >= len(w.data) || w.data[w.i] == ']' {
				w.i++
				break
			}
			if w.data[w.i] == ',' {
				w.i++
				continue
			}
			w.value(path+"["+strconv.Itoa(k)+"]", out)
			k++
		}
	case '"':
		w.str()
	default:
		for w.i < len(w.data) && strings.IndexByte(",]} \t\r\n", w.data[w.i]) < 0 {
			w.i++
		}
		if w.i == (*out)[n].start {
			w.i++ // not JSON; callers give valid JSON, but never loop
		}
	}
	(*out)[n].end = w.i
}

func (w *jsonWalker) str() {
	for w.i++; w.i < len(w.data); w.i++ {
		switch w.data[w.i] {
		case '\\':
			w.i++
		case '"':
			w.i++
			return
		}
	}
}

// jsonValueAt is the innermost value of data around byte off, where
// encoding/json reports a value of the wrong type (just past a literal,
// or just inside an array's or object's opening byte).
func jsonValueAt(data []byte, off int64) (jsonValue, bool) {
	var found jsonValue
	ok := false
	for _, v := range jsonValues(data) {
		if int64(v.start) < off && off <= int64(v.end) {
			found, ok = v, true // later values are nested deeper
		}
	}
	return found, ok
}

// jsonOffsetOf is the offset of the value at key path in data, or of the
// nearest enclosing value the document has; -1 if none.
func jsonOffsetOf(data []byte, key string) int {
	if !json.Valid(data) {
		return -1
	}
	vals := jsonValues(data)
	for k := key; k != ""; k = parentKey(k) {
		for _, v := range vals {
			if v.path == k {
				return v.start
			}
		}
	}
	return -1
}

// parentKey drops a key path's last step: a ".name" or a "[i]".
func parentKey(k string) string {
	if strings.HasSuffix(k, "]") {
		if i := strings.LastIndexByte(k, '['); i >= 0 {
			return k[:i]
		}
	}
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		return k[:i]
	}
	return ""
}

// typeError is a value of the wrong type, in manifest words:
// `a number of milliseconds, e.g. 20000, not the string "20s"`.
func typeError(data []byte, te *json.UnmarshalTypeError) error {
	v, ok := jsonValueAt(data, te.Offset)
	if !ok {
		return merr("", "a value has the wrong type: %s", valueWords(te.Value, nil))
	}
	e := &ManifestError{Key: v.path, at: v.start + 1,
		Msg: expectedWords(v.path, te.Type) + ", not " + valueWords(te.Value, data[v.start:v.end])}
	return e
}

// valueWords says what a JSON value is: `the string "20s"`, `the number
// 1.5`, `true`, `a list`, `an object`. raw may be nil (only the kind).
func valueWords(kind string, raw []byte) string {
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if utf8.RuneCountInString(s) > 40 {
				s = string([]rune(s)[:40]) + "…"
			}
			return "the string " + strconv.Quote(s)
		}
		return "a string"
	case len(raw) > 0 && raw[0] == '[':
		return "a list"
	case len(raw) > 0 && raw[0] == '{':
		return "an object (a table)"
	case len(raw) > 0 && (raw[0] == 't' || raw[0] == 'f'):
		return string(raw)
	case len(raw) > 0:
		return "the number " + string(raw)
	}
	switch {
	case strings.HasPrefix(kind, "number"):
		return "a number"
	case kind == "array":
		return "a list"
	case kind == "object":
		return "an object (a table)"
	case kind == "bool":
		return "true or false"
	}
	return "a " + kind
}

// keyWords are what a key takes, by the key's last name, where that says
// more than its type does.
var keyWords = map[string]string{
	"timeout_ms":          "a number of milliseconds, e.g. 20000",
	"approval_timeout_ms": "a number of milliseconds, e.g. 300000",
	"max_bytes":           "a number of bytes, e.g. 65536",
	"max_request_bytes":   "a number of bytes, e.g. 65536",
	"memory_mb":           "a number of megabytes, e.g. 512",
	"cache_mb":            "a number of megabytes, e.g. 1024",
	"pids":                "a number of processes, e.g. 256",
	"pool":                "a number of warm containers, e.g. 2",
	"pool_max":            "a number of warm containers, e.g. 4",
	"max_open_files":      "a number of open files, e.g. 256",
	"max_files":           "a number of files, e.g. 100",
	"max_redirects":       "a number of redirects, e.g. 3",
	"cpus":                "a number of CPUs, e.g. 1.5",
	"operation":           `an operation in a string: "read", "list", "stat", "search", "write", "edit", "move", "mkdir", "delete", "execute", "fetch" or "post"`,
	"approval":            `"none" or "human"`,
	"approvers":           "a number of distinct approver principals, e.g. 2",
	"approval_when":       `an object (a table) such as {"paths": ["deploy/**"]}`,
	"paths":               `a list of globs, e.g. ["deploy/**", "*.sql"]`,
	"urls":                `a list of URL globs, e.g. ["https://hooks.example.com/prod/*"]`,
	"deny_detail":         `"reason" or "opaque"`,
	"mode":                `"create", "overwrite" or "create_or_overwrite"`,
	"file_mode":           `an octal mode in a string, e.g. "0644"`,
	"dir_mode":            `an octal mode in a string, e.g. "0755"`,
	"hard_links":          `"refuse" or "allow"`,
	"commit":              `"approval", "auto" or "discard"`,
	"commit_on":           `"success" or "always"`,
	"roots":               `a list of directories relative to base, e.g. ["workspace/src"]`,
	"mounts":              `a list of directories relative to base, e.g. ["workspace"]`,
	"never":               `a list of globs, e.g. [".env", "*.pem"]`,
	"keep":                `a list of globs, e.g. ["*.py"]`,
	"hosts":               `a list of host names, e.g. ["pypi.org"]`,
	"schemes":             `a list of URL schemes, e.g. ["https"]`,
	"webhooks":            `a list of URL globs, e.g. ["https://hooks.example.com/ci/*"]`,
	"allowed_headers":     `a list of header names, e.g. ["Accept"]`,
	"cache":               `a list of container paths, e.g. ["/root/.cache/go-build"]`,
	"uids":                "a list of user ids, e.g. [1000]",
	"per_second":          "a number of calls per second, e.g. 5 or 0.5",
	"burst":               "a whole number of calls, e.g. 10",
	"denials":             "a whole number of denials, e.g. 20",
	"window_s":            "a whole number of seconds, e.g. 300",
	"rate":                `an object (a table) such as {"per_second": 5, "burst": 10}`,
	"denial_budget":       `an object (a table) such as {"denials": 20, "window_s": 300}`,
	"gids":                "a list of group ids, e.g. [1000]",
	"env":                 `an object (a table) of variable names to strings, e.g. {"LANG": "C.UTF-8"}`,
	"tools":               "an object (a table) of tools by name",
	"principals":          "an object (a table) of principals by name",
	"commands":            `a list of argv patterns, e.g. [["python", "-m", "unittest"]]`,
	"examples":            `an object (a table) with "match" and "not_match", lists of argv lists`,
	"match":               `a list of argv lists, e.g. [["python", "-m", "unittest"]]`,
	"not_match":           `a list of argv lists, e.g. [["python", "-c", "x"]]`,
	"writes":              `an object (a table) such as {"roots": ["workspace"], "commit": "approval"}`,
	"egress":              `an object (a table) such as {"hosts": ["pypi.org"]}`,
	"redact":              `an object (a table) such as {"builtin": true, "patterns": [{"name": "ticket", "regex": "TCK-[0-9]{6}"}]}`,
	"patterns":            `a list of {"name", "regex"} objects (tables)`,
}

// expectedWords says what the value at key path must be, for a value
// encoding/json could not store in a t: by the key's name where
// keyWords has it, else by t's kind. No Go type name is ever said.
func expectedWords(path string, t reflect.Type) string {
	name, elems := path, 0
	for strings.HasSuffix(name, "]") {
		i := strings.LastIndexByte(name, '[')
		if i < 0 {
			break
		}
		name, elems = name[:i], elems+1
	}
	parent := ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		parent, name = name[:i], name[i+1:]
	}
	switch {
	case elems == 0 && name == "tools" && parent != "":
		return `a list of tool names, e.g. ["read_file"], or ["*"] for all`
	case elems == 0 && (name == "tools" || name == "principals") && parent != "":
	case elems == 0:
		if w, ok := keyWords[name]; ok && !mapEntry(parent) {
			return w
		}
	case name == "commands" && elems == 1:
		return `an argv pattern, a list such as ["python", "-m", "unittest"]`
	case (name == "match" || name == "not_match") && elems == 1:
		return `an argv, a list of strings such as ["python", "-m", "unittest"]`
	case name == "uids" || name == "gids":
		return "a whole number from 0 to 4294967295"
	}
	return kindWords(t)
}

// mapEntry reports whether a key path's parent is a map whose keys are
// names (env, tools, principals), so that the key's own name means
// nothing: env.pool is a variable, not a pool.
func mapEntry(parent string) bool {
	i := strings.LastIndexByte(parent, '.')
	last := parent[i+1:]
	return last == "env" || (i < 0 && (last == "tools" || last == "principals"))
}

// kindWords says what a value of type t is, by its kind.
func kindWords(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another kind of value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object (a table)"
	}
	return "another kind of value"
}

// syntaxError says where and how data, not valid JSON, goes wrong.
func syntaxError(data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	switch {
	case err == nil:
		return &ManifestError{Msg: "the manifest is a JSON object ({\"schema_version\": 1, …}), not " + valueWords("", firstValue(data)), at: firstByte(data) + 1}
	case errors.As(err, &se):
		off := int(se.Offset) - 1 // the byte at fault
		if off < 0 {
			off = 0
		}
		if off < len(data) && (data[off] == '}' || data[off] == ']') {
			j := off - 1
			for j >= 0 && strings.IndexByte(" \t\r\n", data[j]) >= 0 {
				j--
			}
			if j >= 0 && data[j] == ',' {
				return &ManifestError{Msg: fmt.Sprintf("not valid JSON: a comma before %c; JSON has none after the last element, remove it", data[off]), at: j + 1}
			}
		}
		if se.Offset >= int64(len(data)) && strings.Contains(se.Error(), "end of JSON input") {
			return &ManifestError{Msg: "not valid JSON: the document ends early; a } or ] is missing", at: len(data) + 1}
		}
		return &ManifestError{Msg: "not valid JSON: " + se.Error(), at: off + 1}
	}
	return &ManifestError{Msg: "not valid JSON: the document ends early; a } or ] is missing", at: len(data) + 1}
}

func firstByte(data []byte) int {
	i := 0
	for i < len(data) && strings.IndexByte(" \t\r\n", data[i]) >= 0 {
		i++
	}
	return i
}

func firstValue(data []byte) []byte {
	vals := jsonValues(data)
	if len(vals) == 0 {
		return nil
	}
	return data[vals[0].start:vals[0].end]
}
