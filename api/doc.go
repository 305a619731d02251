// Package api holds the wire types and stable reason codes shared by the
// daemon, the Go client and the tests. It imports only the standard library so
// that any program speaking sluice's protocol can depend on it cheaply.
package api
