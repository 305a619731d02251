package scaffold

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// ErrExists is WriteFile's refusal to replace a file without force.
var ErrExists = atomicfile.ErrExists

// WriteFile writes data to path atomically (atomicfile.Write), mode 0644:
// linked into place, so an existing file is never replaced, or with force
// renamed over it.
func WriteFile(path string, data []byte, force bool) error {
	return atomicfile.Write(path, data, 0o644, force)
}

// DefaultOutput is where the manifest for dir goes when no --output is
// given: the user's config directory, sluice/NAME.EXT (NAME: the
// project's base name). Not in the project: a write tool whose root holds
// the manifest could rewrite the policy, and sluiced refuses such a
// manifest.
func DefaultOutput(dir string, f Format) (string, error) {
	cfg, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	name := filepath.Base(dir)
	if name == "/" || name == "." || name == "" {
		name = "root"
	}
	return filepath.Join(cfg, "sluice", name+f.Ext()), nil
}

// Inside reports whether path (a file) lies inside dir, both absolute,
// after resolving symlinks in the existing part of each: a write root at
// dir could then replace it.
func Inside(path, dir string) bool {
	p := resolveExisting(filepath.Dir(path))
	d := resolveExisting(dir)
	return p == d || strings.HasPrefix(p, d+string(filepath.Separator)) || d == string(filepath.Separator)
}

// resolveExisting resolves symlinks in the longest existing prefix of p.
func resolveExisting(p string) string {
	p = filepath.Clean(p)
	var tail []string
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, tail...)...)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(append([]string{p}, tail...)...)
		}
		tail = append([]string{filepath.Base(p)}, tail...)
		p = parent
	}
}
