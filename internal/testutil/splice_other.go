//go:build !linux

package testutil

func spliceBaseline() {}
func spliceRelease()  {}
