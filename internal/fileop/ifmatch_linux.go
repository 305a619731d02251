package fileop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/securefs"
)

// IfMatch values besides "sha256:<hex>".
const (
	IfMatchNone   = ""       // no precondition
	IfMatchAbsent = "absent" // the name must not exist
)

const sha256Prefix = "sha256:"

// ValidateIfMatch checks an if_match argument's form: "", "absent" or
// "sha256:" and 64 lowercase hex digits (ErrInvalidIfMatch).
func ValidateIfMatch(ifMatch string) error {
	switch ifMatch {
	case IfMatchNone, IfMatchAbsent:
		return nil
	}
	hexs, ok := strings.CutPrefix(ifMatch, sha256Prefix)
	if !ok || len(hexs) != 64 || strings.Trim(hexs, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: %q: want \"absent\" or \"sha256:\" and 64 lowercase hex digits", ErrInvalidIfMatch, ifMatch)
	}
	return nil
}

// MatchIfMatch is the if_match precondition, for WriteOptions.Check and
// Delete: "" always holds; "absent" holds when the name does not exist;
// "sha256:<hex>" holds when the name is a regular file with that digest.
// Otherwise it returns ErrPrecondition (and ErrInvalidIfMatch for a
// malformed value). A file that changed while being hashed fails it.
func MatchIfMatch(ifMatch string, cur Current) error {
	return MatchIfMatchContext(context.Background(), ifMatch, cur)
}

// MatchIfMatchContext is MatchIfMatch hashing under ctx: it returns ctx's
// error when ctx ends mid-hash. A file above MaxHashBytes fails the
// precondition (ErrPrecondition and ErrTooLarge) without being read: the
// digest cannot be checked within the cap, and a check that cannot be made
// must not pass.
func MatchIfMatchContext(ctx context.Context, ifMatch string, cur Current) error {
	if err := ValidateIfMatch(ifMatch); err != nil {
		return err
	}
	switch {
	case ifMatch == IfMatchNone:
		return nil
	case ifMatch == IfMatchAbsent:
		if cur.Exists() {
			return fmt.Errorf("%w: want absent, have a %s", ErrPrecondition, cur.Kind)
		}
		return nil
	case cur.Kind != securefs.KindFile:
		return fmt.Errorf("%w: want a regular file, have %s", ErrPrecondition, cur.kindOrAbsent())
	}
	sum, err := cur.SHA256Context(ctx)
	if errors.Is(err, ErrChanged) || errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%w: %w", ErrPrecondition, err)
	}
	if err != nil {
		return err
	}
	if sum != ifMatch {
		return fmt.Errorf("%w: content is %s", ErrPrecondition, sum)
	}
	return nil
}
