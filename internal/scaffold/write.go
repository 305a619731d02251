package scaffold

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrExists is WriteFile's refusal to replace a file without force.
var ErrExists = errors.New("already exists")

// WriteFile writes data to path atomically: into a temporary file in the
// same directory, synced, then linked into place (which fails if path
// exists: no window between a check and the write) or, with force, renamed
// over it. Nothing half-written is ever left at path, and the temporary
// file is removed on every error.
func WriteFile(path string, data []byte, force bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if tmp != "" {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if force {
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		tmp = ""
	} else {
		switch err := os.Link(tmp, path); {
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("%s: %w", path, ErrExists)
		case err != nil:
			// A file system without hard links: check, then rename
			// (a narrow window, only there).
			if _, serr := os.Lstat(path); serr == nil {
				return fmt.Errorf("%s: %w", path, ErrExists)
			}
			if err := os.Rename(tmp, path); err != nil {
				return err
			}
			tmp = ""
		}
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
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
