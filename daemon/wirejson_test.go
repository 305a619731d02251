package daemon

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// checkSame fails unless appendCallResult gives json.Marshal's bytes, or
// declines exactly what Marshal refuses.
func checkSame(t *testing.T, r api.CallResult) {
	t.Helper()
	want, werr := json.Marshal(r)
	got, ok := appendCallResult(nil, &r)
	if werr != nil || !ok {
		if (werr != nil) != !ok {
			t.Fatalf("Marshal error %v, appendCallResult ok %v for %+v", werr, ok, r)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("differs from encoding/json:\n got %q\nwant %q", got, want)
	}
}

var awkward = []string{
	"", "plain", "<script>&amp;</script>", "\u2028\u2029", "a\x00b\x01\x1f\x7f", "\b\f\n\r\t\"\\/",
	"\xff\xfe", "\xe2\x80", "\xe2\x80\xa8x", "\xed\xa0\x80", "日本語", "\U0001F600", "\xf4\x90\x80\x80",
	string([]byte{0xc0, 0xaf}), "é\xe9",
}

func TestCallResultJSON(t *testing.T) {
	one, zero := 1, 0
	yes, no := true, false
	for _, s := range awkward {
		out := s
		checkSame(t, api.CallResult{CallID: s, Verdict: api.Verdict(s), Reason: api.Reason(s), Output: &out, OutputB64: s, Stderr: s,
			Resource: s, PolicyVersion: s, ApprovalID: s, SHA256: s, Signal: s, ExitCode: &one, Durable: &yes, Bytes: -5, DurationMS: 1.5,
			Source: &api.Source{Tool: s, Operation: api.Operation(s), Resource: s, URL: s, SHA256: s, PolicyVersion: s, CallID: s, Untrusted: true}})
	}
	checkSame(t, api.CallResult{Source: &api.Source{}})
	for _, f := range []float64{0, math.Copysign(0, -1), 1e-7, 1e-6, 123.456, 1e20, 1e21, 1e300, -2.5e-9, math.SmallestNonzeroFloat64, math.MaxFloat64, math.NaN(), math.Inf(1), math.Inf(-1)} {
		checkSame(t, api.CallResult{DurationMS: f, ExitCode: &zero, Durable: &no})
	}
	checkSame(t, api.CallResult{})
}

// TestCallResultJSONAllFields sets every field of api.CallResult, found by
// reflection, so a field added there and not to appendCallResult fails
// here.
func TestCallResultJSONAllFields(t *testing.T) {
	var r api.CallResult
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("<x\u2028>")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(-7)
		case reflect.Float64:
			f.SetFloat(2.5)
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			switch p.Elem().Kind() {
			case reflect.String:
				p.Elem().SetString("out\n")
			case reflect.Bool:
				p.Elem().SetBool(false)
			case reflect.Int, reflect.Int64:
				p.Elem().SetInt(3)
			case reflect.Struct:
				setAll(t, p.Elem())
			default:
				t.Fatalf("field %s: a pointer to %s; teach appendCallResult and this test", v.Type().Field(i).Name, p.Elem().Kind())
			}
			f.Set(p)
		case reflect.Slice:
			if f.Type() != reflect.TypeFor[[]api.Change]() {
				t.Fatalf("field %s: a slice of %s; teach appendCallResult and this test", v.Type().Field(i).Name, f.Type().Elem())
			}
			f.Set(reflect.ValueOf([]api.Change{{Path: "<a\u2028>", Action: "create", Bytes: 3, SHA256: "sha256:x", Committed: true},
				{Path: "d", Action: "delete", Reason: api.ReasonNeverListed, Rule: "tools.t.writes.never[0]", Detail: "é"}}))
		default:
			t.Fatalf("field %s of kind %s: teach appendCallResult and this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	checkSame(t, r)
}

// setAll sets every field of the struct v (strings, bools), found by
// reflection: a field added to api.Source and not to appendSource fails
// TestCallResultJSONAllFields.
func setAll(t *testing.T, v reflect.Value) {
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString("<s\u2029>")
		case reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("field %s.%s of kind %s: teach appendCallResult and this test", v.Type().Name(), v.Type().Field(i).Name, f.Kind())
		}
	}
}

func FuzzCallResultJSON(f *testing.F) {
	for i, s := range awkward {
		f.Add(s, s, i%2 == 0, s, s, int64(i), float64(i)*1.25, i%3 == 0, true, int32(i))
	}
	f.Add("c-1", "<>&\u2028", false, "\xff", "", int64(math.MinInt64), 1e21, false, false, int32(math.MinInt32))
	f.Fuzz(func(t *testing.T, id, output string, hasOutput bool, stderr, other string, n int64, ms float64, hasExit, ok bool, exit int32) {
		r := api.CallResult{CallID: id, Verdict: api.Verdict(other), Reason: api.Reason(stderr), OK: ok, OutputB64: other, Stderr: stderr,
			Truncated: hasOutput, Bytes: n, Resource: output, PolicyVersion: other, DurationMS: ms, ApprovalID: id, SHA256: stderr, Signal: other,
			HTTPStatus: int(exit), ContentType: output}
		if hasOutput {
			r.Output = &output
		}
		if hasExit {
			e := int(exit)
			r.ExitCode = &e
			r.Durable = &ok
			r.Size, r.NextOffset = &n, &n
			r.Source = &api.Source{Tool: id, Operation: api.Operation(other), Resource: output, URL: stderr, SHA256: other, PolicyVersion: id, CallID: output, Untrusted: ok}
		}
		checkSame(t, r)
	})
}

func BenchmarkCallResultJSON(b *testing.B) {
	out := string(bytes.Repeat([]byte("0123456789abcde\n"), 256))
	r := api.CallResult{CallID: "c-01M8XGD5S8MZF983SVSN3EAHTY", Verdict: "allow", Reason: "allowed", OK: true, Output: &out, Bytes: 4096,
		Resource: "/var/tmp/x/workspace/src/four_k.txt", PolicyVersion: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", DurationMS: 0.123}
	r.Source = &api.Source{Tool: "read_file", Operation: api.OpRead, Resource: r.Resource, SHA256: r.PolicyVersion,
		PolicyVersion: r.PolicyVersion, CallID: r.CallID, Untrusted: true}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(r)
		}
	})
	b.Run("appendCallResult", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			appendCallResult(make([]byte, 0, 768+len(out)+len(out)/8), &r)
		}
	})
}
