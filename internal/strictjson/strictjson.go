// Package strictjson decodes JSON the way a security boundary must: one
// value, no trailing data, no unknown fields, and keys that match a
// field's JSON name exactly — encoding/json alone matches names
// case-insensitively and lets a repeated key silently win, so
// {"TOOL":"x"} or {"tool":"a","tool":"b"} would pass, and two parsers
// could disagree about what a request says.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// KeyError is an object key that is repeated or not a field's exact name.
type KeyError struct {
	Path string // e.g. args.PATH, list[].x
	Msg  string
	// Offset is the byte offset in the data of the key's opening quote,
	// so that a caller can say where it is (a line and column).
	Offset int
}

func (e *KeyError) Error() string { return e.Path + ": " + e.Msg }

// MsgRepeated is a KeyError's Msg for a key given twice; any other Msg is
// a key that names no field.
const MsgRepeated = "key given twice"

// Decode decodes data into v (a pointer) strictly.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return CheckKeys(data, reflect.TypeOf(v))
}

// CheckKeys walks data alongside type t and rejects, at any depth, an
// object key that is repeated or that names a struct field other than by
// its exact JSON name. data must already be valid JSON for t (Decode and
// the manifest loader decode it first); anything else is an error.
//
// It scans the bytes itself rather than through json.Decoder.Token, which
// allocated for every token (42 of a read call's ~145 allocations). Keys
// are compared as encoding/json reads them: a key with an escape or a
// byte outside printable ASCII is unquoted by encoding/json itself, so
// "\u0074ool" is "tool" here too. FuzzCheckKeys holds it to the
// token-walking version it replaced.
func CheckKeys(data []byte, t reflect.Type) error {
	s := scanner{data: data}
	if err := s.value(t); err != nil {
		var ke *keyErr
		if errors.As(err, &ke) {
			return ke.keyError()
		}
		return err
	}
	s.space()
	if s.i != len(s.data) {
		return s.syntax()
	}
	return nil
}

// scanner walks JSON text that has been validated already.
type scanner struct {
	data []byte
	i    int
}

// keyErr is a KeyError on its way up: the path's steps, innermost first,
// added by each object and array it leaves, so that nothing is built
// for a key that is fine.
type keyErr struct {
	steps []step
	msg   string
	off   int // the key's opening quote
}

// step is a key, or an array's element.
type step struct {
	key  string
	elem bool
}

func (e *keyErr) Error() string { return e.keyError().Error() }

// keyError spells the path as the token walk did: keys joined by ".",
// "[]" after an array.
func (e *keyErr) keyError() *KeyError {
	var b strings.Builder
	for i := len(e.steps) - 1; i >= 0; i-- {
		if e.steps[i].elem {
			b.WriteString("[]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.steps[i].key)
	}
	return &KeyError{Path: b.String(), Msg: e.msg, Offset: e.off}
}

// within adds one step to err's path if it is a keyErr.
func within(err error, st step) error {
	if ke, ok := err.(*keyErr); ok {
		ke.steps = append(ke.steps, st)
	}
	return err
}

var errSyntax = errors.New("strictjson: malformed JSON")

func (s *scanner) syntax() error {
	return fmt.Errorf("%w at byte %d", errSyntax, s.i)
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value checks the value at s.i, of type t (nil: unknown).
func (s *scanner) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s.space()
	if s.i >= len(s.data) {
		return s.syntax()
	}
	switch s.data[s.i] {
	case '{':
		return s.object(t)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		s.i++
		s.space()
		if s.i < len(s.data) && s.data[s.i] == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.value(elem); err != nil {
				return within(err, step{elem: true})
			}
			if end, err := s.after(']'); end || err != nil {
				return err
			}
		}
	case '"':
		_, _, err := s.str()
		return err
	default:
		// a number, true, false or null: up to the next delimiter
		start := s.i
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				if s.i == start {
					return s.syntax()
				}
				return nil
			}
			s.i++
		}
		if s.i == start {
			return s.syntax()
		}
		return nil
	}
}

// str consumes the string at s.i and returns its raw bytes, quotes
// included, and whether they are plain: printable ASCII with no escape,
// so that the text between the quotes is the string itself.
func (s *scanner) str() (raw []byte, plain bool, err error) {
	start := s.i
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return nil, false, s.syntax()
	}
	plain = true
	for s.i++; s.i < len(s.data); s.i++ {
		switch c := s.data[s.i]; {
		case c == '"':
			s.i++
			return s.data[start:s.i], plain, nil
		case c == '\\':
			plain = false
			s.i++ // the escaped byte; \uXXXX's digits are plain bytes
		case c < 0x20 || c >= 0x80:
			plain = false
		}
	}
	return nil, false, s.syntax()
}

// maxSeenInline keys of an object are compared in a list; more go in a map.
const maxSeenInline = 16

func (s *scanner) object(t reflect.Type) error {
	var fields map[string]reflect.Type
	isStruct := t != nil && t.Kind() == reflect.Struct
	if isStruct {
		fields = fieldsOf(t)
	}
	s.i++ // {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil
	}
	var (
		inline [maxSeenInline][]byte
		seen   = inline[:0]
		many   map[string]bool
	)
	for {
		s.space()
		keyAt := s.i
		raw, plain, err := s.str()
		if err != nil {
			return err
		}
		// key is the key as encoding/json reads it: the bytes between
		// the quotes, or, with an escape or a byte outside printable
		// ASCII, what encoding/json unquotes them to.
		key := raw[1 : len(raw)-1]
		if !plain {
			var k string
			if err := json.Unmarshal(raw, &k); err != nil {
				return err
			}
			key = []byte(k)
		}
		twice := false
		if many != nil {
			twice = many[string(key)]
			many[string(key)] = true
		} else {
			for _, k := range seen {
				if bytes.Equal(k, key) {
					twice = true
					break
				}
			}
			if len(seen) < maxSeenInline {
				seen = append(seen, key)
			} else {
				many = make(map[string]bool, 2*maxSeenInline)
				for _, k := range seen {
					many[string(k)] = true
				}
				many[string(key)] = true
			}
		}
		if twice {
			return &keyErr{steps: []step{{key: string(key)}}, msg: MsgRepeated, off: keyAt}
		}
		var vt reflect.Type
		switch {
		case isStruct:
			ft, ok := fields[string(key)]
			if !ok {
				return &keyErr{steps: []step{{key: string(key)}}, msg: "unknown field (names are case-sensitive)", off: keyAt}
			}
			vt = ft
		case t != nil && t.Kind() == reflect.Map:
			vt = t.Elem()
		}
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return s.syntax()
		}
		s.i++
		if err := s.value(vt); err != nil {
			return within(err, step{key: string(key)})
		}
		if end, err := s.after('}'); end || err != nil {
			return err
		}
	}
}

// after consumes what follows a member of an array or object: a comma
// (end false: another member comes) or the closing byte (end true).
func (s *scanner) after(closing byte) (end bool, err error) {
	s.space()
	if s.i >= len(s.data) {
		return false, s.syntax()
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		return false, nil
	case closing:
		s.i++
		return true, nil
	}
	return false, s.syntax()
}

// fieldCache holds each struct type's exact JSON names (collectFields).
var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f := map[string]reflect.Type{}
	collectFields(t, f)
	fieldCache.Store(t, f)
	return f
}

// collectFields maps exact JSON names to field types, following embedded
// structs as encoding/json does.
func collectFields(t reflect.Type, out map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}

// Describe says what is wrong with data that Decode refused, for the
// caller who sent it: the field and the JSON it gave, where known. where
// prefixes field names ("args" for a call's args; "" for the top).
func Describe(where string, err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var ke *KeyError
	switch {
	case errors.As(err, &ke):
		if where != "" {
			return where + "." + ke.Error()
		}
		return ke.Error()
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = where
		} else if where != "" {
			field = where + "." + field
		}
		return field + ": expected " + te.Type.String() + ", got JSON " + te.Value
	case errors.As(err, &se):
		return "malformed JSON at byte " + strconv.FormatInt(se.Offset, 10) + ": " + err.Error()
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if where != "" {
			return where + ": unknown field " + f
		}
		return "unknown field " + f
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of input"
	}
	return "malformed JSON: " + err.Error()
}
