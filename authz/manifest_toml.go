package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// ParseFile parses a manifest by its file name: TOML when it ends in
// .toml, JSON otherwise (docs/manifest.md).
func ParseFile(name string, r io.Reader, dir string) (*Manifest, error) {
	if strings.EqualFold(filepath.Ext(name), ".toml") {
		return ParseTOML(r, dir)
	}
	return Parse(r, dir)
}

// ParseTOML decodes a TOML manifest with the same keys as the JSON one.
// It is as strict: an unknown key is an error naming the key and its line,
// and so is a key given twice (TOML itself forbids that). The decoded
// manifest is then validated exactly as a JSON one (it goes through Parse
// as JSON), so a TOML manifest and its JSON twin have one policy_version.
func ParseTOML(r io.Reader, dir string) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > MaxManifestBytes {
		return nil, merr("", "larger than %d bytes", MaxManifestBytes)
	}
	// schema_version first, as for JSON: it decides how the rest is read.
	var head struct {
		SchemaVersion *int64 `toml:"schema_version"`
	}
	if err := toml.Unmarshal(data, &head); err != nil {
		return nil, tomlError(err)
	}
	if head.SchemaVersion == nil {
		return nil, merr("schema_version", "missing; add schema_version = 1")
	}
	if *head.SchemaVersion != 1 {
		return nil, merr("schema_version", "is %d; this sluice reads only 1", *head.SchemaVersion)
	}
	m := new(Manifest)
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(m); err != nil {
		return nil, tomlError(err)
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return Parse(bytes.NewReader(js), dir)
}

// tomlError names the key and the line at fault.
func tomlError(err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		e := &strict.Errors[0]
		line, _ := e.Position()
		return merr(strings.Join(e.Key(), "."), "line %d: unknown key (schema_version 1 has no such key; check its spelling)", line)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		return merr(strings.Join(de.Key(), "."), "line %d, column %d: %s", line, col, strings.TrimPrefix(de.Error(), "toml: "))
	}
	return merr("", "not valid TOML: %v", err)
}
