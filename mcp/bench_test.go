package mcp

import (
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// BenchmarkToolResult is what the stdio fast path does with a call's
// result once sluiced has answered: the MCP result built (toolResult),
// encoded (encodeResult, as fast.go's call does) and written through
// spliceWriter, for a small read and a 4 KiB one (spliced).
func BenchmarkToolResult(b *testing.B) {
	size := int64(0)
	res := &api.CallResult{CallID: "c-01M8XGD5S8MZF983SVSN3EAHTY", Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true,
		Resource: "/var/tmp/x/workspace/src/a.py", PolicyVersion: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Size: &size}
	sourced := *res
	sourced.Source = &api.Source{Tool: "read_file", Operation: api.OpRead, Resource: res.Resource,
		SHA256: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", PolicyVersion: res.PolicyVersion,
		CallID: res.CallID, Untrusted: true}
	for _, tc := range []struct {
		name string
		out  string
		res  *api.CallResult
	}{
		{"small", "print('hello')\n", res},
		{"small/source", "print('hello')\n", &sourced},
		{"4KiB", strings.Repeat("0123456789abcde\n", 256), res},
		{"4KiB/source", strings.Repeat("0123456789abcde\n", 256), &sourced},
	} {
		res := tc.res
		b.Run(tc.name, func(b *testing.B) {
			outs := newOutputs()
			sw := &spliceWriter{w: io.Discard, out: outs}
			stdout := []byte(tc.out)
			b.ReportAllocs()
			for b.Loop() {
				r := toolResult(res, stdout, nil, outs.text)
				data, err := encodeResult(r)
				if err != nil {
					b.Fatal(err)
				}
				msg := append([]byte(`{"jsonrpc":"2.0","id":1,"result":`), data...)
				msg = append(msg, "}\n"...)
				if _, err := sw.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
