// Package atomicfile writes a file whole or not at all: the manifest
// sluice init writes and the client configs sluice client setup merges
// into (a crash or a full disk never leaves a half-written file).
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrExists is Write's refusal to replace a file without replace.
var ErrExists = errors.New("already exists")

// Write writes data to path atomically, with mode: into a temporary file
// in the same directory, synced, then linked into place (which fails if
// path exists: no window between a check and the write) or, with
// replace, renamed over it; then the directory is synced. Nothing
// half-written is ever left at path, and the temporary file is removed on
// every error.
func Write(path string, data []byte, mode os.FileMode, replace bool) (err error) {
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
	if err := f.Chmod(mode); err != nil {
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
	if replace {
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
