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
	"io"
	"reflect"
	"strconv"
	"strings"
)

// KeyError is an object key that is repeated or not a field's exact name.
type KeyError struct {
	Path string // e.g. args.PATH, list[].x
	Msg  string
}

func (e *KeyError) Error() string { return e.Path + ": " + e.Msg }

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
// its exact JSON name. data must already be valid JSON for t.
func CheckKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walk(dec, t, "")
}

func walk(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walk(dec, elem, path+"[]"); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ]
		return err
	case '{':
		fields := map[string]reflect.Type{}
		isStruct := t != nil && t.Kind() == reflect.Struct
		if isStruct {
			collectFields(t, fields)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key := kt.(string)
			where := key
			if path != "" {
				where = path + "." + key
			}
			if seen[key] {
				return &KeyError{Path: where, Msg: "key given twice"}
			}
			seen[key] = true
			var vt reflect.Type
			switch {
			case isStruct:
				ft, ok := fields[key]
				if !ok {
					return &KeyError{Path: where, Msg: "unknown field (names are case-sensitive)"}
				}
				vt = ft
			case t != nil && t.Kind() == reflect.Map:
				vt = t.Elem()
			}
			if t == rawMessage || t == anyType {
				vt = nil
			}
			if err := walk(dec, vt, where); err != nil {
				return err
			}
		}
		_, err := dec.Token() // }
		return err
	}
	return nil
}

var (
	rawMessage = reflect.TypeOf(json.RawMessage(nil))
	anyType    = reflect.TypeOf((*any)(nil)).Elem()
)

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
