package scaffold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The document model: one tree rendered as TOML (with its comments, and
// with the entries that are off written commented out) or as JSON (without
// either; the comments are returned to be printed).

// kv is one key and its value. Val is a string, int64, bool, []string,
// []any, obj (an inline table) or lines (an array written one element a
// line).
type kv struct {
	Key     string
	Val     any
	Comment []string
	// Off: written commented out in TOML, left out of JSON.
	Off bool
}

// obj is an ordered inline table (a JSON object).
type obj []kv

// lines is an array written one element a line (commands).
type lines []any

// table is a TOML table: [principals.agent], [tools.run_tests.writes].
type table struct {
	Path    []string
	Comment []string
	KVs     []kv
	Off     bool
}

type document struct {
	Header []string
	Top    []kv
	Tables []table
}

// toml renders d as commented TOML.
func (d *document) toml() []byte {
	var b bytes.Buffer
	for _, c := range d.Header {
		writeComment(&b, "", c)
	}
	if len(d.Header) > 0 {
		b.WriteByte('\n')
	}
	for _, e := range d.Top {
		writeKV(&b, e, false)
	}
	for _, t := range d.Tables {
		b.WriteByte('\n')
		for _, c := range t.Comment {
			writeComment(&b, "", c)
		}
		prefix := ""
		if t.Off {
			prefix = "# "
		}
		fmt.Fprintf(&b, "%s[%s]\n", prefix, strings.Join(t.Path, "."))
		for _, e := range t.KVs {
			writeKV(&b, e, t.Off)
		}
	}
	return b.Bytes()
}

func writeComment(b *bytes.Buffer, prefix, c string) {
	if c == "" {
		b.WriteString(prefix + "#\n")
		return
	}
	b.WriteString(prefix + "# " + c + "\n")
}

func writeKV(b *bytes.Buffer, e kv, off bool) {
	off = off || e.Off
	prefix := ""
	if off {
		prefix = "# "
	}
	// A commented-out key's comment is written as any other: removing
	// the "# " before the key alone turns it on.
	for _, c := range e.Comment {
		writeComment(b, "", c)
	}
	text := e.Key + " = " + tomlValue(e.Val)
	for _, l := range strings.Split(text, "\n") {
		b.WriteString(prefix + l + "\n")
	}
}

func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case []string:
		parts := make([]string, len(v))
		for i, s := range v {
			parts[i] = tomlString(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = tomlValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case obj:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = e.Key + " = " + tomlValue(e.Val)
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case lines:
		var b strings.Builder
		b.WriteString("[\n")
		for _, e := range v {
			b.WriteString("  " + tomlValue(e) + ",\n")
		}
		b.WriteString("]")
		return b.String()
	}
	panic(fmt.Sprintf("scaffold: no TOML for %T", v))
}

// tomlString is a literal string ('…', no escapes: regexes stay readable)
// where it can be, else a basic string with TOML's escapes.
func tomlString(s string) string {
	literal := true
	for _, r := range s {
		if r == '\'' || r < 0x20 || r == 0x7f {
			literal = false
			break
		}
	}
	if literal {
		return "'" + s + "'"
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// json renders d as indented JSON, leaving out what is off. Tables become
// nested objects in document order.
func (d *document) json() []byte {
	root := &jnode{}
	for _, e := range d.Top {
		if !e.Off {
			root.set([]string{e.Key}, e.Val)
		}
	}
	for _, t := range d.Tables {
		if t.Off {
			continue
		}
		n := root.child(t.Path)
		for _, e := range t.KVs {
			if !e.Off {
				n.set([]string{e.Key}, e.Val)
			}
		}
	}
	var b bytes.Buffer
	root.write(&b, "")
	b.WriteByte('\n')
	return b.Bytes()
}

// jnode is a JSON object written one key a line.
type jnode struct {
	keys []string
	vals map[string]any // *jnode or a value
}

func (n *jnode) child(path []string) *jnode {
	if len(path) == 0 {
		return n
	}
	if n.vals == nil {
		n.vals = map[string]any{}
	}
	c, ok := n.vals[path[0]].(*jnode)
	if !ok {
		c = &jnode{}
		n.keys = append(n.keys, path[0])
		n.vals[path[0]] = c
	}
	return c.child(path[1:])
}

func (n *jnode) set(path []string, v any) {
	p := n.child(path[:len(path)-1])
	if p.vals == nil {
		p.vals = map[string]any{}
	}
	k := path[len(path)-1]
	if _, ok := p.vals[k]; !ok {
		p.keys = append(p.keys, k)
	}
	p.vals[k] = v
}

func (n *jnode) write(b *bytes.Buffer, indent string) {
	b.WriteString("{\n")
	for i, k := range n.keys {
		b.WriteString(indent + "  " + jsonString(k) + ": ")
		switch v := n.vals[k].(type) {
		case *jnode:
			v.write(b, indent+"  ")
		case lines:
			b.WriteString("[\n")
			for j, e := range v {
				b.WriteString(indent + "    " + jsonValue(e))
				if j < len(v)-1 {
					b.WriteByte(',')
				}
				b.WriteByte('\n')
			}
			b.WriteString(indent + "  ]")
		default:
			b.WriteString(jsonValue(v))
		}
		if i < len(n.keys)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(indent + "}")
}

func jsonValue(v any) string {
	switch v := v.(type) {
	case string:
		return jsonString(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case []string:
		parts := make([]string, len(v))
		for i, s := range v {
			parts[i] = jsonString(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = jsonValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case lines:
		return jsonValue([]any(v))
	case obj:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = jsonString(e.Key) + ": " + jsonValue(e.Val)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	panic(fmt.Sprintf("scaffold: no JSON for %T", v))
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// explain lists each commented key's full path and its comment: what a
// JSON manifest cannot say in itself.
func (d *document) explain() []string {
	var out []string
	add := func(path string, comment []string, off bool) {
		var c []string
		for _, l := range comment {
			if l != "" {
				c = append(c, l)
			}
		}
		if len(c) == 0 {
			return
		}
		if off {
			path += " (left out of the JSON)"
		}
		out = append(out, path+": "+strings.Join(c, " "))
	}
	for _, e := range d.Top {
		add(e.Key, e.Comment, e.Off)
	}
	for _, t := range d.Tables {
		p := strings.Join(t.Path, ".")
		add(p, t.Comment, t.Off)
		for _, e := range t.KVs {
			add(p+"."+e.Key, e.Comment, t.Off || e.Off)
		}
	}
	return out
}
