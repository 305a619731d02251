package fileop

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/errclass"
	"github.com/sluicehq/sluice/internal/securefs"
)

// reasonOf is the reason the daemon reports for err (errclass).
func reasonOf(err error) api.Reason {
	r, _ := errclass.Reason(err)
	return r
}

// TestCommitReasons: each way a commit fails carries its reason, so the
// daemon maps none of them itself (errclass is the one place). A name
// that is no longer what the decision saw is precondition_failed, whatever
// it became; the errors still match their sentinels.
func TestCommitReasons(t *testing.T) {
	f := newFixture(t, securefs.ModeAuto)
	put(t, filepath.Join(f.dir, "file"), "x\n")
	if err := os.Symlink("file", filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	opts := func(m WriteMode) WriteOptions {
		return WriteOptions{Mode: m, UID: -1, GID: -1, MinFree: Reserve{Off: true}}
	}
	write := func(rel string, o WriteOptions) error {
		_, err := Write(f.parent(t, rel), []byte("y\n"), o)
		return err
	}
	del := func(rel string) error {
		_, err := Delete(f.parent(t, rel), nil)
		return err
	}
	withIfMatch := func(ifMatch string) WriteOptions {
		o := opts(CreateOrOverwrite)
		o.Check = func(cur Current) error { return MatchIfMatch(ifMatch, cur) }
		return o
	}
	cases := []struct {
		name string
		err  error
		is   error
		want api.Reason
	}{
		{"create over a file", write("file", opts(Create)), ErrExists, api.ReasonPreconditionFailed},
		{"overwrite of a missing file", write("missing", opts(Overwrite)), securefs.ErrNotExist, api.ReasonPreconditionFailed},
		{"write over a directory", write("sub", opts(CreateOrOverwrite)), ErrIsDir, api.ReasonPreconditionFailed},
		{"write over a symlink", write("link", opts(CreateOrOverwrite)), ErrNotRegular, api.ReasonPreconditionFailed},
		{"stale if_match", write("file", withIfMatch(digest("other\n"))), ErrPrecondition, api.ReasonPreconditionFailed},
		{"if_match absent over a file", write("file", withIfMatch("absent")), ErrPrecondition, api.ReasonPreconditionFailed},
		{"malformed if_match", write("file", withIfMatch("md5:x")), ErrInvalidIfMatch, api.ReasonInvalidArgs},
		{"delete of a missing name", del("missing"), securefs.ErrNotExist, api.ReasonPreconditionFailed},
		{"delete of a directory", del("sub"), ErrIsDir, api.ReasonPreconditionFailed},
		{"bad name", write(TempPrefix+"x", opts(CreateOrOverwrite)), ErrBadName, api.ReasonInvalidPath},
		{"reserve", write("file", WriteOptions{Mode: CreateOrOverwrite, UID: -1, GID: -1, MinFree: Reserve{Bytes: 1 << 62}}),
			unix.ENOSPC, api.ReasonNoSpace},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.is)
		}
		if got, ok := errclass.Reason(c.err); got != c.want || !ok {
			t.Errorf("%s: %v is %s (%v), want %s", c.name, c.err, got, ok, c.want)
		}
	}
	// A commit that ran is not_durable when its directory sync failed;
	// the sentinel says so whatever errno it wraps.
	if r := reasonOf(errors.Join(ErrNotDurable, os.ErrClosed)); r != api.ReasonNotDurable {
		t.Errorf("ErrNotDurable is %s", r)
	}
}
