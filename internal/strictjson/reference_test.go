package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// checkKeysTokens is the json.Decoder.Token walk CheckKeys replaced,
// kept as the reference FuzzCheckKeys holds CheckKeys to.
func checkKeysTokens(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walkTokens(dec, t, "")
}

func walkTokens(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walkTokens(dec, elem, path+"[]"); err != nil {
				return err
			}
		}
		_, err := dec.Token()
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
			if err := walkTokens(dec, vt, where); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	return nil
}

// request is shaped like a call request: the types CheckKeys meets most.
type request struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	Task *string         `json:"task,omitempty"`
	Opts struct {
		Stream bool     `json:"stream"`
		Argv   []string `json:"argv"`
	} `json:"opts"`
}

var fuzzTypes = []reflect.Type{
	reflect.TypeOf(&outer{}),
	reflect.TypeOf(&request{}),
	reflect.TypeOf(map[string]any{}),
	reflect.TypeOf((*any)(nil)).Elem(),
	reflect.TypeOf([]inner{}),
	nil,
}

func sameKeyResult(t *testing.T, data []byte, typ reflect.Type) {
	t.Helper()
	got, want := CheckKeys(data, typ), checkKeysTokens(data, typ)
	var gk, wk *KeyError
	switch {
	case want == nil && got == nil:
	case errors.As(want, &wk) && errors.As(got, &gk):
		if gk.Path != wk.Path || gk.Msg != wk.Msg {
			t.Fatalf("%v on %q: got %v, the token walk %v", typ, data, got, want)
		}
		// Offset is the key's opening quote
		if gk.Offset < 0 || gk.Offset >= len(data) || data[gk.Offset] != '"' {
			t.Fatalf("%v on %q: %v at offset %d, not a key", typ, data, got, gk.Offset)
		}
	default:
		t.Fatalf("%v on %q: got %v, the token walk %v", typ, data, got, want)
	}
}

func TestCheckKeysMatchesTokenWalk(t *testing.T) {
	for _, s := range []string{
		`{"tool":"a"}`, `{"tool":"a","tool":"b"}`, `{"\u0074ool":"a","tool":"b"}`,
		`{"TOOL":"a"}`, `{"t\u00f6ol":1}`, "{\"t\xffol\":1,\"t\xfeol\":2}", `{"a\"b":1,"a\u0022b":2}`,
		`{"in":{"path":"x","path":"y"}}`, `{"list":[{"path":1},{"Path":2}]}`,
		`{"nest":{"K":{"path":"z"},"K":{}}}`, `{"env":{"A":"1","a":"2"}}`,
		`{"args":{"x":[{"y":1,"y":2}]}}`, ` [ {"a":1} , [] , {} ] `, `"x"`, `12.5e3`, `null`,
		`{"opts":{"argv":["a","b"],"stream":true,"stream":false}}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"a":19}`,
		`{"\ud800":1,"\ufffd":2}`, `{"\/":1,"/":2}`, `{"":1,"":2}`, `{"":{"x":1,"x":2}}`,
		`{"":[{"":{"a":1,"a":2}}]}`, `[[{"k":[{"z":1,"z":1}]}]]`, `{"list":[[{"Path":1}]]}`,
	} {
		if !json.Valid([]byte(s)) {
			t.Fatalf("test input %q is not JSON", s)
		}
		for _, typ := range fuzzTypes {
			sameKeyResult(t, []byte(s), typ)
		}
	}
}

func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{`{"tool":"a","args":{"path":"x"}}`, `{"tool":"a","tool":"b"}`, `{"in":{"PATH":1}}`,
		`{"list":[{"path":"y","path":1}]}`, `{"\u0074ool":1,"tool":2}`, `[{"a":{"b":[1,{"c":2,"c":3}]}}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		for _, typ := range fuzzTypes {
			sameKeyResult(t, data, typ)
		}
	})
}

func BenchmarkCheckKeys(b *testing.B) {
	data := []byte(`{"tool":"read_file","args":{"path":"workspace/src/four_k.txt"},"task":"t-1"}`)
	typ := reflect.TypeOf(&request{})
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := CheckKeys(data, typ); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkKeysTokens(data, typ); err != nil {
				b.Fatal(err)
			}
		}
	})
}
