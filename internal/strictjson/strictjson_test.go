package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

type inner struct {
	Path *string `json:"path"`
}

type outer struct {
	Tool  string            `json:"tool"`
	Args  json.RawMessage   `json:"args,omitempty"`
	In    *inner            `json:"in,omitempty"`
	List  []inner           `json:"list,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Nest  map[string]*inner `json:"nest,omitempty"`
	Skip  string            `json:"-"`
	plain int
}

func TestDecode(t *testing.T) {
	ok := []string{
		`{"tool":"a"}`, `{"tool":"a","args":{"ANY":1,"any":2}}`, `{"env":{"A":"1","a":"2"}}`,
		`{"in":{"path":"x"},"list":[{"path":"y"}],"nest":{"K":{"path":"z"}}}`,
	}
	for _, s := range ok {
		var o outer
		if err := Decode([]byte(s), &o); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := map[string]string{
		`{"TOOL":"a"}`:                           "TOOL: unknown field",
		`{"Tool":"a"}`:                           "unknown field",
		`{"tool":"a","tool":"b"}`:                "twice",
		`{"in":{"PATH":"x"}}`:                    "in.PATH",
		`{"list":[{"Path":"y"}]}`:                "list[].Path",
		`{"nest":{"K":{"path":"z","path":"w"}}}`: "twice",
		`{"env":{"A":"1","A":"2"}}`:              "twice",
		`{"tool":"a"} 1`:                         "trailing",
		`{"bogus":1}`:                            "unknown field",
		`{"Skip":"x"}`:                           "unknown field",
	}
	for s, want := range bad {
		var o outer
		err := Decode([]byte(s), &o)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want error with %q", s, err, want)
		}
	}
}
