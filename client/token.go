package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// SetToken makes every request of c present a delegation token
// ("Authorization: Bearer TOKEN", docs/tokens.md): c then acts with the
// token's rights, never with its peer's own. Call it before c is used.
// A token with a space or a control character is refused.
func (c *Client) SetToken(token string) error {
	if token == "" || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errors.New("a token is one word of printable characters")
	}
	c.token = token
	return nil
}

func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// CreateToken mints a delegation token that narrows the caller's rights
// (POST /v1/tokens). The token is in the answer this once.
func (c *Client) CreateToken(ctx context.Context, req api.TokenRequest) (*api.TokenCreated, error) {
	var t api.TokenCreated
	return &t, c.getJSON(ctx, http.MethodPost, "/v1/tokens", req, &t)
}

// Tokens lists the caller's live tokens (an approver's: every one), never
// their secrets.
func (c *Client) Tokens(ctx context.Context) (*api.Tokens, error) {
	var t api.Tokens
	return &t, c.getJSON(ctx, http.MethodGet, "/v1/tokens", nil, &t)
}

// RevokeToken revokes a token by id (the minter's own; an approver's any).
func (c *Client) RevokeToken(ctx context.Context, id string) (*api.TokenRevoked, error) {
	var t api.TokenRevoked
	return &t, c.getJSON(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, &t)
}

// ReadTokenFile reads a delegation token from a file, as `sluice mcp
// --token-file` and `sluice call --token-file` do: the file must not be
// readable or writable by others (a token is a bearer secret), and a
// trailing newline is trimmed.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s: not a regular file", path)
	}
	// Windows has no mode bits to check (its ACLs are the user's).
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o007 != 0 {
		return "", fmt.Errorf("token file %s: mode %04o lets other users read or change it; a token is a secret: chmod 600 %s", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimRight(string(b), "\r\n")
	if tok == "" || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("token file %s: not one token on one line", path)
	}
	return tok, nil
}
