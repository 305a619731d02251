package authz

import (
	"strings"
	"testing"
)

// TestMaxOpenFiles: max_open_files is an execute key with a default, a
// bounded range and a message that names it; file tools refuse it.
func TestMaxOpenFiles(t *testing.T) {
	exec := func(v string) string {
		return `{"schema_version":1,"tools":{"t":{"operation":"execute","commands":[["true"]]` + v + `}}}`
	}
	m, err := Parse(strings.NewReader(exec("")), "/b")
	if err != nil || m.Tools["t"].EffectiveMaxOpenFiles() != DefaultMaxOpenFiles {
		t.Fatalf("default: %v %+v", err, m)
	}
	m, err = Parse(strings.NewReader(exec(`,"max_open_files":100`)), "/b")
	if err != nil || m.Tools["t"].EffectiveMaxOpenFiles() != 100 {
		t.Fatalf("100: %v", err)
	}
	for _, v := range []string{"-1", "8", "65537"} {
		_, err := Parse(strings.NewReader(exec(`,"max_open_files":`+v)), "/b")
		if err == nil || !strings.Contains(err.Error(), "tools.t.max_open_files") {
			t.Errorf("max_open_files %s: %v, want an error naming the key", v, err)
		}
	}
	_, err = Parse(strings.NewReader(`{"schema_version":1,"tools":{"r":{"operation":"read","roots":["w"],"max_open_files":32}}}`), "/b")
	if err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Errorf("on a read tool: %v", err)
	}
}
