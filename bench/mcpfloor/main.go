//go:build linux

// Command mcpfloor is the floor of bench/mcp.sh (--floor): an MCP server
// of a few lines over stdio (hand-written JSON-RPC, one message a line)
// whose one tool reads the file named by its first argument and, with
// "sync" as its second, first makes one 4 KiB O_DIRECT|O_DSYNC write into
// a preallocated file beside it, as sluiced's write-ahead ring makes a
// call's record durable. It is what any MCP server that keeps a durable
// record per call costs at the least; it checks nothing and keeps
// nothing.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mcpfloor FILE [sync]")
		os.Exit(2)
	}
	file := os.Args[1]
	sync := len(os.Args) > 2 && os.Args[2] == "sync"
	var sfd int
	var blk []byte
	if sync {
		var err error
		ring := filepath.Join(filepath.Dir(file), ".mcpfloor.ring")
		if sfd, err = unix.Open(ring, unix.O_CREAT|unix.O_RDWR|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "mcpfloor:", err)
			os.Exit(1)
		}
		if err := unix.Fallocate(sfd, 0, 0, 1<<20); err != nil {
			fmt.Fprintln(os.Stderr, "mcpfloor:", err)
			os.Exit(1)
		}
		// O_DIRECT wants an aligned buffer: an anonymous mapping is.
		if blk, err = unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err != nil {
			fmt.Fprintln(os.Stderr, "mcpfloor:", err)
			os.Exit(1)
		}
	}
	r := bufio.NewReaderSize(os.Stdin, 1<<16)
	var n int64
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &m) != nil || m.ID == nil {
			continue // notifications
		}
		var res any
		switch m.Method {
		case "initialize":
			res = map[string]any{"protocolVersion": m.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "mcpfloor", "version": "0"}}
		case "tools/list":
			res = map[string]any{"tools": []any{map[string]any{"name": "bench_read", "inputSchema": map[string]any{"type": "object"}}}}
		case "tools/call":
			b, err := os.ReadFile(file)
			if err != nil {
				fmt.Fprintln(os.Stderr, "mcpfloor:", err)
				os.Exit(1)
			}
			if sync {
				blk[0] = byte(n)
				if _, err := unix.Pwrite(sfd, blk, (n%256)*4096); err != nil {
					fmt.Fprintln(os.Stderr, "mcpfloor:", err)
					os.Exit(1)
				}
			}
			n++
			res = map[string]any{"content": []any{map[string]any{"type": "text", "text": string(b)}},
				"structuredContent": map[string]any{"verdict": "allow", "bytes": len(b)}}
		default:
			res = map[string]any{}
		}
		out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": res})
		if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
			return
		}
	}
}
