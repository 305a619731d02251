package authz

import (
	"strings"
	"testing"
)

const workloadManifest = `{"schema_version":1,
 "principals":{
  "dev":{"uids":[1000],"tools":["*"]},
  "pods":{"cgroups":["/kubepods.slice/**"],"uids":[1000],"tools":["read_file"]},
  "reviewer":{"units":["review@*.service"],"tools":["read_file"]},
  "ops":{"uids":[0],"gids":[10],"tools":["*"],"approver":true}},
 "tools":{"read_file":{"operation":"read","roots":["src"]},"write_file":{"operation":"write","roots":["src"]}}}`

func TestIdentifyWorkload(t *testing.T) {
	m := parse(t, workloadManifest)
	if !m.Workload() {
		t.Fatal("Workload() = false")
	}
	pod := "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-ab.scope"
	for _, tc := range []struct {
		c    Caller
		want string
	}{
		// uid 1000 in a pod is the pod, not dev: it gets less, never more.
		{Caller{UID: 1000, GID: 1000, Cgroup: pod}, "pods"},
		{Caller{UID: 1000, GID: 1000, Cgroup: "/user.slice/user-1000.slice/session-3.scope"}, "dev"},
		// a pod's workload principal lists uid 1000: another uid in a pod is nobody of it,
		// and falls to the uid rules (uid 1001 is nobody).
		{Caller{UID: 1001, GID: 1001, Cgroup: pod}, ""},
		// the unit of a delegated sub-cgroup is the service above it
		{Caller{UID: 1001, GID: 1001, Cgroup: "/system.slice/review@pr-7.service/payload"}, "reviewer"},
		{Caller{UID: 1001, GID: 1001, Cgroup: "/system.slice/review.service"}, ""},
		{Caller{UID: 0, GID: 0, Cgroup: "/"}, "ops"},
		{Caller{UID: 5, GID: 10, Cgroup: "/"}, "ops"},
		// an unknown cgroup maps nobody, not even by uid: uid 1000's wider
		// rights as dev were perhaps what a workload principal narrows.
		{Caller{UID: 1000, GID: 1000}, ""},
		{Caller{UID: 0, GID: 0}, ""},
		// "**" matches no component too: the slice itself
		{Caller{UID: 1000, GID: 1000, Cgroup: "/kubepods.slice"}, "pods"},
		{Caller{UID: 1000, GID: 1000, Cgroup: "/kubepods.slicex/a"}, "dev"},
	} {
		got, ok := m.Identify(tc.c)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Identify(%+v) = %q, %t; want %q", tc.c, got, ok, tc.want)
		}
	}
}

func TestUnitOf(t *testing.T) {
	for in, want := range map[string]string{
		"/system.slice/sluice-agent.service":          "sluice-agent.service",
		"/system.slice/a.service/sub/leaf":            "a.service",
		"/user.slice/user-1000.slice/session-2.scope": "session-2.scope",
		"/":                          "",
		"/kubepods.slice/x.slice":    "",
		"/a.service/b.scope/c.slice": "a.service",
		// named beneath a delegated unit: still that unit
		"/system.slice/review@pr-7.service/payload/deploy.service":              "review@pr-7.service",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/agent.service": "user@1000.service",
	} {
		if got := UnitOf(in); got != want {
			t.Errorf("UnitOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCgroupMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, cg string
		want     bool
	}{
		{"/a/*", "/a/b", true},
		{"/a/*", "/a/b/c", false},
		{"/a/**", "/a", true},
		{"/a/**", "/a/b/c", true},
		{"/a/**/z", "/a/b/c/z", true},
		{"/a/**/z", "/a/b/c/y", false},
		{"/**", "/", true},
		{"/a/b", "/a/b", true},
		{"/a/b", "/a/bc", false},
		{"/a/pod-*.slice/**", "/a/pod-1.slice/x.scope", true},
	} {
		if got := cgroupMatch(tc.glob, tc.cg); got != tc.want {
			t.Errorf("cgroupMatch(%q, %q) = %t", tc.glob, tc.cg, got)
		}
	}
}

func TestWorkloadManifestErrors(t *testing.T) {
	tool := `"tools":{"r":{"operation":"read","roots":["src"]}}`
	for doc, want := range map[string]string{
		`{"schema_version":1,"principals":{"p":{"units":["a/b.service"],"tools":["r"]}},` + tool + `}`:               "principals.p.units[0]",
		`{"schema_version":1,"principals":{"p":{"units":["agent"],"tools":["r"]}},` + tool + `}`:                     "names no service or scope",
		`{"schema_version":1,"principals":{"p":{"units":["[.service"],"tools":["r"]}},` + tool + `}`:                 "not a valid glob",
		`{"schema_version":1,"principals":{"p":{"cgroups":["kubepods/**"],"tools":["r"]}},` + tool + `}`:             "principals.p.cgroups[0]",
		`{"schema_version":1,"principals":{"p":{"cgroups":["/a/../b"],"tools":["r"]}},` + tool + `}`:                 "\"..\"",
		`{"schema_version":1,"principals":{"p":{"cgroups":["/a//b"],"tools":["r"]}},` + tool + `}`:                   "empty",
		`{"schema_version":1,"principals":{"p":{"cgroups":["/a"],"unit":["x.service"],"tools":["r"]}},` + tool + `}`: "unit",
	} {
		_, err := Parse(strings.NewReader(doc), "/tmp")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s:\n err %v, want it to mention %q", doc, err, want)
		}
	}
	// A workload principal's uids may repeat a uid principal's.
	if _, err := Parse(strings.NewReader(workloadManifest), "/tmp"); err != nil {
		t.Fatal(err)
	}
}
