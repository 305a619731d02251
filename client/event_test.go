package client

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// FuzzDecodeEvent: decodeEvent decodes any line as json.Unmarshal does
// (the same event, or an error for the same lines).
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{
		`{"event":"output","stream":"stdout","data":"hello"}`,
		`{"event":"output","stream":"stderr","data":"a\nb\t\"q\" \\ \/ \u003c\u0026\u003e \u2028 é \ud83d\ude00"}` + "\n",
		`{"event":"output","stream":"stdout","data":"\u00e9\u0000\b\f\r"}`,
		`{"event":"output","stream":"stdout","data":"bad \x escape"}`,
		`{"event":"output","stream":"stdout","data":"raw ` + "\x01" + `"}`,
		`{"event":"output","stream":"stdout","data":"` + "\xff\xfe" + `"}`,
		`{"event":"output","stream":"stdout","data":"a"b"}`,
		`{"event":"output","stream":"stdout","data":"\ud800"}`,
		`{"event":"output","stream":"stdout","data":"x","data":"y"}`,
		`{"event":"output","stream":"stdout","data_b64":"aGk="}`,
		`{"event":"output","stream":"stdout","data":"\"}`,
		`{"event":"output","stream":"stdout","data":"\u12"}`,
		`{"event":"decision","call_id":"c1","verdict":"allow","reason":"allowed"}`,
		`{"event":"result","call_id":"c1","verdict":"allow","reason":"allowed","ok":true,"bytes":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var got, want api.Event
		gerr := decodeEvent(line, &got)
		werr := json.Unmarshal(line, &want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: decodeEvent %v, json.Unmarshal %v", line, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeEvent %+v, json.Unmarshal %+v", line, got, want)
		}
	})
}
