//go:build linux

package daemon

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/escapetest"
	"github.com/sluicehq/sluice/internal/securefs"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestCheckMetricsAddr(t *testing.T) {
	for _, c := range []struct {
		addr    string
		anyAddr bool
		ok      bool
	}{
		{"127.0.0.1:9464", false, true},
		{"127.0.0.2:9464", false, true},
		{"[::1]:9464", false, true},
		{"localhost:9464", false, true},
		{"0.0.0.0:9464", false, false},
		{":9464", false, false},
		{"[::]:9464", false, false},
		{"192.0.2.10:9464", false, false},
		{"metrics.example:9464", false, false},
		{"127.0.0.1", false, false}, // no port
		{"0.0.0.0:9464", true, true},
	} {
		err := checkMetricsAddr(c.addr, c.anyAddr)
		if (err == nil) != c.ok {
			t.Errorf("checkMetricsAddr(%q, %v) = %v, want ok=%v", c.addr, c.anyAddr, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), "not a loopback") && !strings.Contains(err.Error(), "--insecure-metrics-any-addr") {
			t.Errorf("refusal of %q does not name the way out: %v", c.addr, err)
		}
	}
	// Run refuses before it binds anything.
	err := Run(context.Background(), Config{Manifest: "/nonexistent.json", MetricsListen: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("Run with a non-loopback metrics address: %v", err)
	}
}

// TestMetrics scrapes /metrics over real HTTP on 127.0.0.1 after a few
// calls and checks that each counter moved as those calls say.
func TestMetrics(t *testing.T) {
	testutil.RequireRoot(t)
	notify, msgs := testutil.NotifySocket(t) // READY=1 says the pool is warm
	t.Setenv("NOTIFY_SOCKET", notify)
	fx := escapetest.Build(t)
	m := writeManifest(t, fx.Base, `{"schema_version":1,
	  "tools":{"read_file":{"operation":"read","roots":["workspace/src"]},
	           "echo":{"operation":"execute","commands":[["echo","hi"]],"pool":1},
	           "cold":{"operation":"execute","commands":[["true"]],"pool":0}}}`)
	addr := make(chan string, 1)
	h := start(t, m, securefs.ModeAuto, func(c *Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.MetricsListening = func(a string) { addr <- a }
	})
	url := "http://" + <-addr + "/metrics"
	testutil.AwaitNotify(t, msgs, "READY=1", "STOPPING=1")

	for _, call := range []struct {
		tool string
		args any
		want api.Reason
	}{
		{"read_file", map[string]string{"path": "workspace/src/a.py"}, api.ReasonAllowed},
		{"read_file", map[string]string{"path": "workspace/secret.txt"}, api.ReasonOutsideRoots},
		{"no_such_tool", map[string]string{}, api.ReasonUnknownTool},
		{"echo", map[string]any{}, api.ReasonAllowed},
		{"cold", map[string]any{}, api.ReasonAllowed},
	} {
		if res, _ := h.call(call.tool, call.args); res.Reason != call.want {
			t.Fatalf("%s: reason %s, want %s", call.tool, res.Reason, call.want)
		}
	}
	health, err := h.c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// value finds the sample of family name whose labels include want.
	value := func(name string, want ...string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(want); i += 2 {
				if labels[want[i]] != want[i+1] {
					continue next
				}
			}
			return sampleValue(m), true
		}
		return 0, false
	}
	expect := func(name string, want float64, labels ...string) {
		t.Helper()
		if v, ok := value(name, labels...); !ok || v != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
		}
	}
	atLeast := func(name string, want float64, labels ...string) {
		t.Helper()
		if v, ok := value(name, labels...); !ok || v < want {
			t.Errorf("%s%v = %v (present %v), want at least %v", name, labels, v, ok, want)
		}
	}
	expect("sluice_calls_total", 1, "tool", "read_file", "verdict", "allow", "reason", "allowed")
	expect("sluice_calls_total", 1, "tool", "read_file", "verdict", "deny", "reason", "outside_roots")
	expect("sluice_calls_total", 1, "tool", toolUnknown, "verdict", "deny", "reason", "unknown_tool")
	expect("sluice_calls_total", 1, "tool", "echo", "verdict", "allow", "reason", "allowed")
	if _, ok := value("sluice_calls_total", "tool", "no_such_tool"); ok {
		t.Error("a tool name the client made up became a label value")
	}
	expect("sluice_principal_calls_total", 3, "principal", "local", "verdict", "allow")
	expect("sluice_principal_calls_total", 2, "principal", "local", "verdict", "deny")
	expect("sluice_principal_denials_total", 1, "principal", "local", "reason", "outside_roots")
	expect("sluice_principal_denials_total", 1, "principal", "local", "reason", "unknown_tool")
	expect("sluice_approvals_parked", 0)
	expect("sluice_decision_seconds", 5)
	expect("sluice_execution_seconds", 1, "tool", "read_file")
	expect("sluice_execution_seconds", 1, "tool", "echo")
	expect("sluice_pool_hits_total", 1, "tool", "echo")
	expect("sluice_pool_misses_total", 1, "tool", "cold")
	expect("sluice_pool_size", 1, "tool", "echo")
	expect("sluice_pool_size", 0, "tool", "cold")
	if _, ok := value("sluice_pool_ready", "tool", "echo"); !ok {
		t.Error("no sluice_pool_ready for echo")
	}
	atLeast("sluice_audit_append_seconds", 9) // policy_loaded, 5 decisions, 3 results
	atLeast("sluice_audit_sync_seconds", 5)
	expect("sluice_calls_in_flight", 0)
	expect("sluice_containers_running", 0)
	expect("sluice_containers_queued", 0)
	atLeast("sluice_connections_open", 1)
	expect("sluice_connections_evicted_total", 0)
	expect("sluice_connections_refused_total", 0)
	expect("sluice_policy_info", 1, "policy_version", health.PolicyVersion)
	atLeast("go_goroutines", 1)
	atLeast("process_open_fds", 1)

	// Anything but GET /metrics is not served.
	if r, err := hc.Get("http://" + resp.Request.URL.Host + "/"); err != nil || r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /: %v %v", r.Status, err)
	} else {
		r.Body.Close()
	}
}

// sampleValue is a counter's or gauge's value, or a histogram's count.
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}
