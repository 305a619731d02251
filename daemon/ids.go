//go:build linux

package daemon

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newCallID returns "c-" + a ULID: 48 bits of milliseconds then 80 random
// bits, so ids sort by time and never collide in practice.
func newCallID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	rand.Read(b[6:])
	// 128 bits -> 26 base32 characters, most significant first.
	var out [28]byte
	out[0], out[1] = 'c', '-'
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[2+i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
