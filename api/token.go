package api

import "strings"

// Delegation tokens (docs/tokens.md): a principal mints a token that can
// only narrow its own rights, and hands it to a sub-agent, which presents
// it as "Authorization: Bearer TOKEN".

// TokenPrefix begins every token: "slt_" + the minting daemon's instance
// id + "_" + the secret, so a token of another daemon is recognizably
// foreign.
const TokenPrefix = "slt_"

// Token lifetimes: a token lives DefaultTokenTTLSeconds unless the minter
// asks for less or more, never more than MaxTokenTTLSeconds.
const (
	DefaultTokenTTLSeconds = 3600
	MaxTokenTTLSeconds     = 24 * 3600
)

// ErrTokenInvalid is the error code of a request to an endpoint other than
// POST /v1/calls whose token is unknown, expired, revoked, foreign,
// presented by the wrong peer or malformed (401), or of a token presented
// where none is taken (403). A call with such a token is a recorded
// denial with reason token_invalid instead.
const ErrTokenInvalid = "token_invalid"

// TokenRequest is the body of POST /v1/tokens.
type TokenRequest struct {
	// Tools the token may call: each one the minter may call.
	Tools []string `json:"tools"`
	// Roots, when given, narrow the token's file tools: each lies beneath
	// one of the roots of a tool of the token (relative to the manifest's
	// base, as a tool's roots are).
	Roots []string `json:"roots,omitempty"`
	// Task pins the token's calls to this task.
	Task string `json:"task,omitempty"`
	// TTLSeconds is the token's lifetime (0: DefaultTokenTTLSeconds).
	TTLSeconds int64 `json:"ttl_s,omitempty"`
	// PeerUID, when set, is the only peer uid that may present the token.
	PeerUID *uint32 `json:"peer_uid,omitempty"`
	// Subject names who the token is for (a sub-agent), for the records.
	Subject string `json:"subject,omitempty"`
}

// TokenCreated answers POST /v1/tokens: the token is shown this once.
type TokenCreated struct {
	Token     string `json:"token"`
	ID        string `json:"id"`
	ExpiresAt string `json:"expires_at"`
}

// TokenInfo describes a live token, never its secret.
type TokenInfo struct {
	ID        string   `json:"id"`
	Minter    string   `json:"minter"`
	Subject   string   `json:"subject,omitempty"`
	Tools     []string `json:"tools"`
	Roots     []string `json:"roots,omitempty"`
	Task      string   `json:"task,omitempty"`
	PeerUID   *uint32  `json:"peer_uid,omitempty"`
	CreatedAt string   `json:"created_at"`
	ExpiresAt string   `json:"expires_at"`
}

// Tokens answers GET /v1/tokens.
type Tokens struct {
	Tokens []TokenInfo `json:"tokens"`
}

// TokenRevoked answers DELETE /v1/tokens/{id}.
type TokenRevoked struct {
	ID string `json:"id"`
}

// BearerToken returns the token an Authorization header value carries
// ("Bearer TOKEN"), and whether it had that form.
func BearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
