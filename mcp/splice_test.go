package mcp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/api"
)

// A large output goes out as the SDK would have encoded it: the message
// spliceWriter writes decodes to the result with the output in place, the
// placeholder is spent, and small outputs are not touched.
func TestSpliceWriterPutsOutputsInPlace(t *testing.T) {
	out := newOutputs()
	big := strings.Repeat("<héllo \"world\"\n\t\\ ", 200) // escapes, non-ASCII, HTML characters
	tricky := `"sluice-output-0123456789abcdef0123456789abcdef"` + strings.Repeat("y", spliceMin)
	res := toolResult(&api.CallResult{Verdict: api.VerdictAllow, Reason: api.ReasonAllowed, OK: true, CallID: "c1"},
		[]byte(big), []byte(tricky), out.text)
	if got := res.Content[0].(*sdk.TextContent).Text; got == big || !strings.HasPrefix(got, tokenPrefix[1:]) {
		t.Fatalf("a large output is not a placeholder: %.40q", got)
	}
	if small := out.text("short"); small != "short" {
		t.Fatalf("a small output became %q", small)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := jsonrpc.MakeID(float64(7))
	line, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: raw})
	if err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	sw := &spliceWriter{w: &w, out: out}
	if n, err := sw.Write(append(line, '\n')); err != nil || n != len(line)+1 {
		t.Fatalf("Write: %d, %v", n, err)
	}
	msg, err := jsonrpc.DecodeMessage(bytes.TrimSuffix(w.Bytes(), []byte("\n")))
	if err != nil {
		t.Fatalf("the spliced message is not JSON-RPC: %v", err)
	}
	var got sdk.CallToolResult
	if err := json.Unmarshal(msg.(*jsonrpc.Response).Result, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Content) != 2 || got.Content[0].(*sdk.TextContent).Text != big ||
		got.Content[1].(*sdk.TextContent).Text != "stderr:\n"+tricky {
		t.Fatalf("spliced result: %+v", got.Content)
	}
	if len(out.m) != 0 {
		t.Fatalf("%d outputs left waiting", len(out.m))
	}
	// A message without placeholders passes as it is.
	w.Reset()
	plain := []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n")
	if _, err := sw.Write(plain); err != nil || !bytes.Equal(w.Bytes(), plain) {
		t.Fatalf("plain message changed: %q %v", w.Bytes(), err)
	}
}

// Without the stdio writer (another transport) there are no placeholders.
func TestNoSpliceWithoutStdio(t *testing.T) {
	var out *outputs
	big := strings.Repeat("x", 4*spliceMin)
	if out.text(big) != big {
		t.Fatal("a placeholder without a writer to replace it")
	}
}
