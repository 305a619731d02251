// Package client is a Go client for sluiced over its unix socket. It
// imports only api and the standard library.
package client
