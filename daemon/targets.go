//go:build linux

package daemon

import (
	"github.com/sluicehq/sluice/authz"
	"github.com/sluicehq/sluice/internal/securefs"
)

// What a call's targets resolved to (authz.Op.Targets: a path, a parent,
// a URL; two for an operation of two paths), held for its executor.

// heldTarget is what one target of a call resolved to, by root index:
// handles on existing paths, or parents and final names.
type heldTarget struct {
	handles map[int]*securefs.Handle
	parents map[int]*parentRef
}

// target is the call's target i, made when first needed.
func (c *call) target(i int) *heldTarget {
	for len(c.targets) <= i {
		c.targets = append(c.targets, heldTarget{})
	}
	return &c.targets[i]
}

// decidedBy is the resolution that decided the call's target i.
func (c *call) decidedBy(i int) *authz.Resource {
	if i < len(c.dec.Targets) {
		return c.dec.Targets[i]
	}
	if i == 0 {
		return c.dec.Resource
	}
	return nil
}

// handle is the handle resolved for target i under the root that
// decided it; nil when there is none.
func (c *call) handle(i int) *securefs.Handle {
	r := c.decidedBy(i)
	if r == nil || i >= len(c.targets) {
		return nil
	}
	return c.targets[i].handles[r.Root]
}

// parent is the parent resolved for target i under the root that
// decided it; nil when there is none.
func (c *call) parent(i int) *parentRef {
	r := c.decidedBy(i)
	if r == nil || i >= len(c.targets) {
		return nil
	}
	return c.targets[i].parents[r.Root]
}
