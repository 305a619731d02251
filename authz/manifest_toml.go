package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// ParseFile parses a manifest by its file name: TOML when it ends in
// .toml, JSON otherwise (docs/manifest.md).
//
// Its errors name the file and where in it: NAME:LINE:COL: KEY: MSG
// (docs/manifest.md, "Errors").
func ParseFile(name string, r io.Reader, dir string) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > MaxManifestBytes {
		return nil, &ManifestError{File: name, Msg: fmt.Sprintf("larger than %d bytes", MaxManifestBytes)}
	}
	var m *Manifest
	if strings.EqualFold(filepath.Ext(name), ".toml") {
		m, err = parseTOML(data, dir)
	} else if m, err = parseJSON(data, dir); err != nil {
		err = positioned(err, data)
	}
	var me *ManifestError
	if errors.As(err, &me) {
		named := *me
		named.File = name
		return nil, &named
	}
	return m, err
}

// ParseTOML reads a TOML manifest as the JSON document it spells and
// validates that with Parse: one validation path for both formats, so a
// reviewed TOML manifest is exactly what is enforced.
//
// The TOML is decoded into a generic tree, never into the Manifest struct:
// go-toml matches struct fields ignoring case while TOML holds "tools" and
// "Tools" as two keys, so `Tools = ["*"]` after `tools = ["read_file"]`
// silently won, and omitted-value rules differed (`schemes = []` read as
// absent). The tree keeps every key as written and every empty array;
// Parse then refuses any key not spelled exactly, at every depth, as it
// does for JSON (docs/security.md, "The third review"). A TOML value with
// no JSON meaning (a date or time, nan, inf) is refused. Errors name the
// key and, where the key is found in the document, its line.
//
// Without a file name, an error's place is said in its message:
// "manifest: KEY: line N: MSG".
func ParseTOML(r io.Reader, dir string) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > MaxManifestBytes {
		return nil, merr("", "larger than %d bytes", MaxManifestBytes)
	}
	m, err := parseTOML(data, dir)
	var me *ManifestError
	if errors.As(err, &me) && me.Line > 0 {
		inline := *me
		switch {
		case me.near != "":
			inline.Msg = fmt.Sprintf("in %s at line %d: %s", me.near, me.Line, me.Msg)
		case me.Col > 0:
			inline.Msg = fmt.Sprintf("line %d, column %d: %s", me.Line, me.Col, me.Msg)
		default:
			inline.Msg = fmt.Sprintf("line %d: %s", me.Line, me.Msg)
		}
		inline.Line, inline.Col, inline.near = 0, 0, ""
		return nil, &inline
	}
	return m, err
}

// parseTOML is ParseTOML of the document data, each error's line (and
// column, for a syntax error) in its Line and Col.
func parseTOML(data []byte, dir string) (*Manifest, error) {
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		return nil, tomlError(err)
	}
	lines := tomlKeyLines(data)
	// schema_version first, as for JSON: it decides how the rest is read.
	switch v, ok := tree["schema_version"]; {
	case !ok:
		return nil, merr("schema_version", "missing; add schema_version = 1")
	case v != int64(1):
		return nil, merr("schema_version", "is %s; this sluice reads only 1", tomlValueText(v))
	}
	var buf bytes.Buffer
	if err := tomlToJSON(&buf, tree, ""); err != nil {
		return nil, lines.at(err)
	}
	m, err := parseJSON(buf.Bytes(), dir)
	if err != nil {
		return nil, lines.at(err)
	}
	return m, nil
}

// tomlValueText shows a scalar as TOML writes it, for an error message.
func tomlValueText(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// tomlToJSON writes v, a tree from toml.Unmarshal, as JSON. Keys are
// written as they are (sorted: TOML already refused a key given twice);
// a float keeps a fraction or exponent, so 1.0 stays a float and an
// integer key refuses it, as TOML's types say.
func tomlToJSON(buf *bytes.Buffer, v any, key string) error {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, k)
			buf.WriteByte(':')
			sub := k
			if key != "" {
				sub = key + "." + k
			}
			if err := tomlToJSON(buf, v[k], sub); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := tomlToJSON(buf, e, fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case string:
		writeJSONString(buf, v)
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case int64:
		buf.WriteString(strconv.FormatInt(v, 10))
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return merr(key, "is %v, which has no JSON meaning; no manifest key takes it", v)
		}
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		buf.WriteString(s)
	default:
		// go-toml decodes nothing else but dates and times (time.Time for
		// an offset date-time, which authz, pure and clockless, does not
		// import by name).
		return merr(key, "is a TOML date or time, which has no JSON meaning; no manifest key takes one (quote it if it is a string)")
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always marshals
	buf.Write(b)
}

// tomlLines maps a key path, its parts joined by ".", to the line of its
// first appearance in the document (a key = value or a table header).
type tomlLines map[string]int

// tomlKeyLines walks the document's syntax (it has been decoded once
// already, so it parses) and records where each key path appears.
func tomlKeyLines(data []byte) tomlLines {
	lines := tomlLines{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = lines.key(&p, nil, e.Key())
		case unstable.KeyValue:
			k := lines.key(&p, table, e.Key())
			lines.value(&p, k, e.Value())
		}
	}
	return lines
}

// key records each prefix of the key path prefix+parts and returns it.
func (l tomlLines) key(p *unstable.Parser, prefix []string, it unstable.Iterator) []string {
	path := append([]string(nil), prefix...)
	for it.Next() {
		n := it.Node()
		path = append(path, string(n.Data))
		l.note(strings.Join(path, "."), p.Shape(n.Raw).Start.Line)
	}
	return path
}

// value records the keys of inline tables within a value.
func (l tomlLines) value(p *unstable.Parser, path []string, n *unstable.Node) {
	switch n.Kind {
	case unstable.InlineTable:
		for it := n.Children(); it.Next(); {
			kv := it.Node()
			if kv.Kind != unstable.KeyValue {
				continue
			}
			l.value(p, l.key(p, path, kv.Key()), kv.Value())
		}
	case unstable.Array:
		for it := n.Children(); it.Next(); {
			l.value(p, path, it.Node())
		}
	}
}

func (l tomlLines) note(path string, line int) {
	if _, ok := l[path]; !ok {
		l[path] = line
	}
}

// at adds to a ManifestError the line of its key, or of the nearest
// enclosing key the document spells.
func (l tomlLines) at(err error) error {
	var me *ManifestError
	if !errors.As(err, &me) || me.Key == "" {
		return err
	}
	k := me.Key
	if i := strings.IndexByte(k, '['); i >= 0 {
		k = k[:i] // an array's element: the line of the array
	}
	for exact := true; k != ""; exact = false {
		if line, ok := l[k]; ok {
			out := &ManifestError{Key: me.Key, Msg: me.Msg, Line: line}
			if !exact {
				out.near = k
			}
			return out
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return err
}

// tomlError names the key and the line at fault in a document that does
// not decode as TOML.
func tomlError(err error) error {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		return &ManifestError{Key: strings.Join(de.Key(), "."), Msg: strings.TrimPrefix(de.Error(), "toml: "), Line: line, Col: col}
	}
	return merr("", "not valid TOML: %v", err)
}
