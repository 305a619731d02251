//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/errclass"
)

func TestParseIDRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IDRange
		err  string // in the error; "" means valid
	}{
		{"2130706432-2130771967", DefaultIDRange, ""},
		{"0x7F000000-0x7F00FFFF", DefaultIDRange, ""},
		{" 100000 - 100001 ", IDRange{100000, 100001}, ""},
		{"100000", IDRange{}, "START-END"},
		{"a-b", IDRange{}, "START-END"},
		{"100001-100000", IDRange{}, "above END"},
		{"1000-70000", IDRange{}, "below 65536"},
		{"65534-70000", IDRange{}, "below 65536"},
		{"2147483000-2147483648", IDRange{}, "2^31"},
		{"100000-100000", IDRange{}, "at least 2"},
		{"100000-4294967296", IDRange{}, "START-END"}, // over 32 bits
	} {
		got, err := ParseIDRange(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
	var r IDRange
	if err := r.Set(DefaultIDRange.String()); err != nil || r != DefaultIDRange {
		t.Fatalf("Set(String()) round trip: %v %v", r, err)
	}
}

// withHostFiles points the account files at a temp dir for one test.
func withHostFiles(t *testing.T, passwd, group, subuid string) {
	t.Helper()
	dir := t.TempDir()
	files := map[*string]string{&passwdFile: passwd, &groupFile: group, &subuidFile: subuid}
	for v, content := range files {
		old := *v
		*v = filepath.Join(dir, filepath.Base(old))
		if err := os.WriteFile(*v, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { *v = old })
	}
	old := subgidFile
	subgidFile = filepath.Join(dir, "absent-subgid") // a missing file is no entries
	t.Cleanup(func() { subgidFile = old })
}

func TestHostIDsSkipped(t *testing.T) {
	withHostFiles(t,
		"root:x:0:0::/root:/bin/sh\n# comment\n+nis\nalice:x:100002:100009::/home/alice:/bin/sh\n",
		"root:x:0:\nbuilders:x:100004:\n",
		"bob:100006:2\n")
	host, err := readHostIDs()
	if err != nil {
		t.Fatal(err)
	}
	// 100000..100011: host-held 100002 (alice), 100004 (group), 100006-7
	// (bob's subuids), 100009 (alice's primary gid); 100003 is in the user
	// database only (the fake lookup).
	rng := IDRange{100000, 100011}
	var looked []uint32
	a, err := newIDAlloc(rng, host, func(id uint32) (string, error) {
		looked = append(looked, id)
		if id == 100003 {
			return "user ldap-carol", nil
		}
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for {
		id, err := a.take()
		var ex *IDsExhaustedError
		if errors.As(err, &ex) {
			if ex.Live != len(got) || ex.Range != rng {
				t.Fatalf("exhausted: %+v after %d", ex, len(got))
			}
			// Nothing ran and a retry may succeed: busy, as a full
			// admission queue is.
			if r, _ := errclass.Reason(fmt.Errorf("create: %w", err)); r != api.ReasonBusy {
				t.Fatalf("exhausted is %s, want busy", r)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	want := []uint32{100000, 100001, 100005, 100008, 100010, 100011}
	if !equalIDs(got, want) {
		t.Fatalf("handed out %v, want %v (lowest first, no host id)", got, want)
	}
	// Ids are reused only once given back, lowest first, and looked up
	// in the user database only the first time.
	a.give(100008)
	a.give(100001)
	if id, _ := a.take(); id != 100001 {
		t.Fatalf("after giving back 100001 and 100008: got %d, want 100001", id)
	}
	if id, _ := a.take(); id != 100008 {
		t.Fatalf("then %d, want 100008", id)
	}
	if _, err := a.take(); err == nil {
		t.Fatal("a held id was handed out again")
	}
	if wantLooked := []uint32{100000, 100001, 100003, 100005, 100008, 100010, 100011}; !equalIDs(looked, wantLooked) {
		t.Fatalf("looked up %v, want %v", looked, wantLooked)
	}
}

func TestIDLookupFailsClosed(t *testing.T) {
	fail := true
	a, err := newIDAlloc(IDRange{100000, 100001}, &hostIDs{}, func(uint32) (string, error) {
		if fail {
			return "", errors.New("ldap down")
		}
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.take(); err == nil || !strings.Contains(err.Error(), "ldap down") {
		t.Fatalf("take with a failing user database: %v", err)
	}
	fail = false
	if id, err := a.take(); err != nil || id != 100000 {
		t.Fatalf("after the database is back: %d %v (the id must not have been lost)", id, err)
	}
}

func TestRangeMostlyHostHeldRefused(t *testing.T) {
	withHostFiles(t, "root:x:0:0::/root:/bin/sh\nalice:x:100001:100001::/:/bin/sh\n", "", "bob:100002:3\n")
	host, err := readHostIDs()
	if err != nil {
		t.Fatal(err)
	}
	// 4 of 6 held: refused, naming who holds them.
	_, err = newIDAlloc(IDRange{100000, 100005}, host, nil)
	if err == nil || !strings.Contains(err.Error(), "user alice") || !strings.Contains(err.Error(), "bob") {
		t.Fatalf("mostly held range: %v", err)
	}
	// every id held
	if _, err := newIDAlloc(IDRange{100001, 100003}, host, nil); err == nil {
		t.Fatal("a range with no free id was accepted")
	}
	// 4 of 10: accepted.
	if _, err := newIDAlloc(IDRange{100000, 100009}, host, nil); err != nil {
		t.Fatal(err)
	}
}

func equalIDs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
