package walk

import (
	"errors"
	"path"
	"regexp"
)

// Errors.
var (
	// ErrNotSupported: the walk needs Linux (openat2, or openat and statx).
	ErrNotSupported = errors.New("walk: not supported on this platform")
	// ErrNoSkip: Options.Skip is nil. A walk that was not told what is
	// hidden refuses to run rather than show everything (fail closed);
	// pass SkipNone for a tool without never globs.
	ErrNoSkip = errors.New("walk: no skip filter given")
	// ErrNoQuery: a search with neither a name matcher nor a pattern.
	ErrNoQuery = errors.New("walk: search needs a name or a content pattern")
)

// Skip reports whether an entry is hidden: rel is its path relative to
// the walk's start directory (slash-separated, never "." or empty), name
// its last component as the kernel returned it, isDir whether it is a
// directory (a symlink to one is not). The caller joins rel to the start
// directory's own path when its globs are anchored higher. A hidden entry
// and everything beneath it are invisible to the walk's results.
type Skip func(rel, name string, isDir bool) bool

// SkipNone hides nothing: for a tool without never globs.
func SkipNone(rel, name string, isDir bool) bool { return false }

// Limit names, as Result.Limits lists them.
const (
	LimitResults   = "max_results"    // more records than MaxResults
	LimitBytes     = "max_bytes"      // the next record did not fit MaxBytes
	LimitEntries   = "max_entries"    // more shown entries than MaxEntries
	LimitScan      = "max_scan"       // more directory entries read than MaxScan
	LimitDepth     = "max_depth"      // a directory below MaxDepth was not entered
	LimitFileBytes = "max_file_bytes" // a file was searched only in its first MaxFileBytes
	LimitCanceled  = "canceled"       // the context ended the walk
)

// Defaults, for zero fields of Options.
const (
	DefaultMaxDepth     = 64
	DefaultMaxEntries   = 200_000
	DefaultMaxScan      = 1_000_000
	DefaultMaxResults   = 1000
	DefaultMaxBytes     = 65536
	DefaultMaxFileBytes = 4 << 20
	DefaultMaxLineBytes = 512
)

// Options bound a walk. Zero fields take the defaults above; a zero
// Options refuses to run (Skip is required).
type Options struct {
	// Skip hides never-listed entries; required (see ErrNoSkip).
	Skip Skip
	// CrossMounts lets the walk enter directories and read files on
	// other mounts than the start directory's. Off by default: a
	// directory that is a mount point is shown but not entered, a file
	// bind-mounted in is not read (Stats.Mounts counts both).
	CrossMounts bool
	// RefuseHardLinks: a regular file with more than one link is not
	// read (its other name may be never-listed); Stats.HardLinked counts
	// them. Set it when the tool refuses hard links for reads
	// (authz Tool.RefusesHardLinks).
	RefuseHardLinks bool

	MaxDepth   int   // levels below the start directory entered (its entries are depth 1)
	MaxEntries int   // shown entries visited
	MaxScan    int   // directory entries read, hidden ones included
	MaxResults int   // records in the output
	MaxBytes   int64 // bytes of output, whole lines only
	// MaxFileBytes bounds what content search reads of one file; a
	// longer file is searched in its first MaxFileBytes and the result
	// says so (LimitFileBytes).
	MaxFileBytes int64
	// MaxLineBytes bounds the text of one matching line in a record; a
	// longer line is cut at a UTF-8 boundary and its record says
	// "cut":true.
	MaxLineBytes int
	// Workers reads files for content search (default GOMAXPROCS, at
	// most 8).
	Workers int
	// Content, when set, is what content search matches instead of a
	// file's bytes: the daemon's redaction (it keeps line breaks, so
	// line numbers stay the file's), so that neither a line nor whether
	// a pattern matched tells of a secret. Called from several workers.
	Content func(data []byte) []byte

	// fallback forces the openat path (tests): what a kernel without
	// openat2 gets.
	fallback bool
}

// Query is what a search looks for. Name matches an entry's base name
// (the caller supplies the glob so that one definition of it serves the
// daemon: Glob is path.Match); nil matches every name. Content, when set,
// is matched line by line against regular files whose name matched;
// without it, matching names are the results.
type Query struct {
	Name    func(name string) bool
	Content *regexp.Regexp
}

// Glob returns a matcher of base names by path.Match, after checking the
// pattern is well formed.
func Glob(pattern string) (func(string) bool, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	return func(name string) bool {
		ok, _ := path.Match(pattern, name)
		return ok
	}, nil
}

// Result is a walk's output.
//
// Out holds one JSON object per line. For Search without Content:
// {"path","type"}; with Content, one per matching line:
// {"path","line","text"} (plus "cut":true when the text was cut at
// MaxLineBytes). For Tree: {"name","type"} (plus "size" when sizes were
// asked for: a regular file's size, 0 for anything else), name being the
// entry's path relative to the listed directory — at depth 1 the same
// lines as a one-level list. Paths are relative to the start directory;
// type is file, dir, symlink or other.
type Result struct {
	Out     []byte
	Records int
	// Truncated: some output was left out or some of the tree was not
	// looked at; Limits says which limits did it, in the order first hit.
	Truncated bool
	Limits    []string
	Stats     Stats
}

// Stats count what the walk saw, of shown entries only (hidden ones are
// never counted).
type Stats struct {
	Dirs, Files, Symlinks, Other int64 // shown entries by type
	FilesRead                    int64 // files whose content was searched
	Binary                       int64 // files not searched: a NUL in their first 8 KiB
	HardLinked                   int64 // files not read: more than one link (RefuseHardLinks)
	Mounts                       int64 // directories not entered, files not read: another mount
	Changed                      int64 // entries gone or of another type when opened (a rename raced the walk)
	Errors                       int64 // entries that failed to open or read otherwise
}

func (o *Options) normalize() error {
	if o.Skip == nil {
		return ErrNoSkip
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxDepth, DefaultMaxDepth)
	def(&o.MaxEntries, DefaultMaxEntries)
	def(&o.MaxScan, DefaultMaxScan)
	def(&o.MaxResults, DefaultMaxResults)
	def(&o.MaxLineBytes, DefaultMaxLineBytes)
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	return nil
}
