package secretscan

import (
	"io"
	"strings"
	"testing"
)

// logText is output of the usual kind: short lines, no secret.
func logText(n int) []byte {
	line := "2024-05-01T12:00:00Z INFO served GET /api/v1/items?page=3 in 4.2ms status=200 bytes=5123 user=alice\n"
	return []byte(strings.Repeat(line, n/len(line)+1)[:n])
}

// BenchmarkRedact4KiB is the cost redaction adds to a 4 KiB read.
func BenchmarkRedact4KiB(b *testing.B) {
	s := mustScanner(b, true)
	for _, c := range []struct {
		name string
		in   []byte
	}{
		{"clean", logText(4 << 10)},
		{"secrets", append(logText(4<<10-len(pemKey)-100), "key="+awsKeyID+" "+jwt+"\n"+pemKey...)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.in)))
			b.ReportAllocs()
			for b.Loop() {
				s.Redact(c.in)
			}
		})
	}
}

// BenchmarkWriter64MiB streams 64 MiB in 32 KiB writes (what the
// sandbox's pipes deliver) through a Writer: MB/s on a large output.
func BenchmarkWriter64MiB(b *testing.B) {
	s := mustScanner(b, true)
	for _, c := range []struct {
		name  string
		chunk []byte
	}{
		{"log lines", logText(32 << 10)},
		{"one line", []byte(strings.Repeat("abcdefgh ", (32<<10)/9))},
		{"a key id per line", []byte(strings.Repeat("id="+awsKeyID+" ok\n", (32<<10)/27))},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := (64 << 20) / len(c.chunk)
			b.SetBytes(int64(n * len(c.chunk)))
			for b.Loop() {
				w := s.NewWriter(io.Discard)
				for range n {
					w.Write(c.chunk)
				}
				w.Flush()
			}
		})
	}
}
