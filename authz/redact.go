package authz

import (
	"strconv"

	"github.com/sluicehq/sluice/internal/secretscan"
)

// Redact is the "redact" key, manifest-wide and per tool (docs/manifest.md,
// "Redaction"): what is replaced by "[REDACTED:kind]" in everything a
// tool's call returns.
//
// Absent at both levels, nothing is redacted: a manifest without the key
// behaves as before it existed. Present, Builtin defaults to true. A
// tool's own redact takes its builtin from the tool when set there, else
// from the manifest's, and its patterns after the manifest's.
type Redact struct {
	Builtin  *bool           `json:"builtin,omitempty" toml:"builtin"`
	Patterns []RedactPattern `json:"patterns,omitempty" toml:"patterns"`
}

// RedactPattern is a manifest's own detector: Regex (RE2) matched within
// one line, replaced by "[REDACTED:Name]".
type RedactPattern struct {
	Name  string `json:"name" toml:"name"`
	Regex string `json:"regex" toml:"regex"`
}

// MaxRedactPatterns bounds the patterns of one redact key.
const MaxRedactPatterns = 64

// Redactor is the tool's compiled redaction; nil when nothing is
// redacted.
func (t *Tool) Redactor() *secretscan.Scanner { return t.scan }

// validateRedact compiles each tool's redaction from the manifest's and
// its own: a pattern that does not compile, or could match across a line
// break, is a load error naming it.
func validateRedact(m *Manifest) error {
	if err := checkRedact("redact", m.Redact); err != nil {
		return err
	}
	for _, name := range sortedKeys(m.Tools) {
		t := m.Tools[name]
		key := "tools." + name + ".redact"
		if err := checkRedact(key, t.Redact); err != nil {
			return err
		}
		if m.Redact == nil && t.Redact == nil {
			continue
		}
		builtin := true
		var pats []secretscan.Pattern
		for _, r := range []*Redact{m.Redact, t.Redact} {
			if r == nil {
				continue
			}
			if r.Builtin != nil {
				builtin = *r.Builtin
			}
			for _, p := range r.Patterns {
				pats = append(pats, secretscan.Pattern{Name: p.Name, Regex: p.Regex})
			}
		}
		s, err := secretscan.New(builtin, pats)
		if err != nil {
			return merr(key, "%v", err) // checkRedact compiled each; fail closed
		}
		if !s.Empty() {
			t.scan = s
		}
	}
	return nil
}

// checkRedact checks one redact key's patterns, each compiled on its own
// so that an error names its index under its key.
func checkRedact(key string, r *Redact) error {
	if r == nil {
		return nil
	}
	if len(r.Patterns) > MaxRedactPatterns {
		return merr(key+".patterns", "has %d patterns; at most %d", len(r.Patterns), MaxRedactPatterns)
	}
	for i, p := range r.Patterns {
		if err := secretscan.CheckPattern(secretscan.Pattern{Name: p.Name, Regex: p.Regex}); err != nil {
			return merr(key+".patterns["+strconv.Itoa(i)+"]", "%v", err)
		}
	}
	return nil
}
