//go:build linux

package daemon

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/audit"
	"github.com/sluicehq/sluice/authz"
)

// Delegation tokens (docs/tokens.md, docs/security.md "Delegation
// tokens"): a principal mints a token that can only narrow its own
// rights, for a sub-agent that presents it as "Authorization: Bearer
// TOKEN". A call with a token is decided as its minter, under the
// manifest in force (so a reload that takes a right from the minter takes
// it from the token too), then narrowed by the token: its tools, its roots
// (resolved by the kernel, tokens_roots.go), its task. Anything wrong with
// a token is token_invalid and never falls back to the peer's own rights.
//
// Tokens live in memory only: sluiced keeps each one's sha256, never the
// secret, and a restart forgets them all (the instance id changes, so an
// old token is then foreign).

// Token limits.
const (
	maxTokenTools      = 64
	maxTokenRoots      = 16
	maxTokensPerMinter = 256
	maxSubject         = 128
	tokenSecretBytes   = 32 // 256 bits
)

// Why a presented token is refused: for the log, never for the caller,
// who is told token_invalid whatever the cause.
var (
	errTokenMalformed = errors.New("malformed token")
	errTokenForeign   = errors.New("token of another sluiced (audience)")
	errTokenUnknown   = errors.New("unknown token")
	errTokenExpired   = errors.New("expired token")
	errTokenRevoked   = errors.New("revoked token")
	errTokenWrongPeer = errors.New("token presented by a peer uid it is not bound to")
)

// tokenGrant is one minted token: everything but its secret.
type tokenGrant struct {
	id, minter, subject string
	tools               []string
	roots               []string // cleaned, relative to base
	task                string
	peerUID             *uint32
	created, expires    time.Time
	hash                [sha256.Size]byte

	// revoked is set under tokenStore.mu when the token is revoked (by
	// id or by a task cancel); a call holding the grant sees it when it is
	// decided again (after an approval wait).
	revoked bool
}

// tokenStore holds the live tokens of this daemon.
type tokenStore struct {
	// instance is this daemon's audience: random at each start.
	instance string
	now      func() time.Time

	mu     sync.Mutex
	byHash map[[sha256.Size]byte]*tokenGrant
	byID   map[string]*tokenGrant
}

func newTokenStore(now func() time.Time) *tokenStore {
	if now == nil {
		now = time.Now
	}
	var b [8]byte
	rand.Read(b[:])
	return &tokenStore{instance: hex.EncodeToString(b[:]), now: now,
		byHash: map[[sha256.Size]byte]*tokenGrant{}, byID: map[string]*tokenGrant{}}
}

// mint stores g under a fresh secret and returns the token, which is
// shown this once. g's id, hash and times are filled here.
func (s *tokenStore) mint(g *tokenGrant, ttl time.Duration) (string, error) {
	var secret [tokenSecretBytes]byte
	rand.Read(secret[:])
	sec := hex.EncodeToString(secret[:])
	var idb [10]byte
	rand.Read(idb[:])
	g.id = "t-" + strings.ToLower(base32NoPad(idb[:]))
	g.hash = sha256.Sum256([]byte(sec))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.gcLocked(now)
	n := 0
	for _, o := range s.byID {
		if o.minter == g.minter {
			n++
		}
	}
	if n >= maxTokensPerMinter {
		return "", errTooManyTokens
	}
	g.created, g.expires = now, now.Add(ttl)
	s.byHash[g.hash] = g
	s.byID[g.id] = g
	return api.TokenPrefix + s.instance + "_" + sec, nil
}

var errTooManyTokens = errors.New("too many live tokens")

// gcLocked forgets expired tokens; s.mu held.
func (s *tokenStore) gcLocked(now time.Time) {
	for id, g := range s.byID {
		if !now.Before(g.expires) {
			s.dropLocked(id, g)
		}
	}
}

func (s *tokenStore) dropLocked(id string, g *tokenGrant) {
	g.revoked = true
	delete(s.byID, id)
	delete(s.byHash, g.hash)
}

// authenticate finds the grant of a presented token, for a peer of uid.
// A token of another daemon, an unknown, expired or revoked one, or one
// bound to another uid is an error (its grant is returned when known, for
// the record).
func (s *tokenStore) authenticate(tok string, uid uint32) (*tokenGrant, error) {
	rest, ok := strings.CutPrefix(tok, api.TokenPrefix)
	if !ok {
		return nil, errTokenMalformed
	}
	inst, sec, ok := strings.Cut(rest, "_")
	if !ok || len(sec) != 2*tokenSecretBytes || !isLowerHex(sec) || inst == "" {
		return nil, errTokenMalformed
	}
	if inst != s.instance {
		return nil, errTokenForeign
	}
	h := sha256.Sum256([]byte(sec))
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.byHash[h]
	if g == nil {
		return nil, errTokenUnknown
	}
	if err := s.checkLocked(g, uid); err != nil {
		return g, err
	}
	return g, nil
}

// check says whether g may still be used by a peer of uid: not revoked,
// not expired, and presented by the uid it is bound to.
func (s *tokenStore) check(g *tokenGrant, uid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkLocked(g, uid)
}

func (s *tokenStore) checkLocked(g *tokenGrant, uid uint32) error {
	switch {
	case g.revoked:
		return errTokenRevoked
	case !s.now().Before(g.expires):
		s.dropLocked(g.id, g)
		return errTokenExpired
	case g.peerUID != nil && *g.peerUID != uid:
		return errTokenWrongPeer
	}
	return nil
}

// list returns the live tokens minted by minter (every one for all).
func (s *tokenStore) list(minter string, all bool) []api.TokenInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcLocked(s.now())
	out := []api.TokenInfo{}
	for _, g := range s.byID {
		if all || g.minter == minter {
			out = append(out, g.info())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].CreatedAt < out[j].CreatedAt || out[i].CreatedAt == out[j].CreatedAt && out[i].ID < out[j].ID
	})
	return out
}

// revoke revokes the token id when minter minted it or the caller is an
// approver; false for an unknown id and for another's token alike.
func (s *tokenStore) revoke(id, minter string, approver bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.byID[id]
	if g == nil || !(approver || minter != "" && g.minter == minter) {
		return false
	}
	s.dropLocked(id, g)
	return true
}

// minterOf is the minter of the live token id, "" for none.
func (s *tokenStore) minterOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.byID[id]; g != nil {
		return g.minter
	}
	return ""
}

// revokeTasks revokes the tokens pinned to the cancelled tasks, and
// returns their ids.
func (s *tokenStore) revokeTasks(keys []taskKey) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, g := range s.byID {
		if g.task != "" && slices.Contains(keys, taskKey{g.minter, g.task}) {
			s.dropLocked(id, g)
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (g *tokenGrant) info() api.TokenInfo {
	return api.TokenInfo{ID: g.id, Minter: g.minter, Subject: g.subject, Tools: g.tools, Roots: g.roots, Task: g.task,
		PeerUID: g.peerUID, CreatedAt: g.created.UTC().Format(time.RFC3339Nano), ExpiresAt: g.expires.UTC().Format(time.RFC3339Nano)}
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func base32NoPad(b []byte) string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz" // Crockford, lower case
	var out []byte
	var acc uint32
	bits := 0
	for _, x := range b {
		acc = acc<<8 | uint32(x)
		bits += 8
		for bits >= 5 {
			bits -= 5
			out = append(out, alphabet[(acc>>bits)&31])
		}
	}
	if bits > 0 {
		out = append(out, alphabet[(acc<<(5-bits))&31])
	}
	return string(out)
}

// tokenUse is the token a call presented. budgets and records key on its
// id (tokenID).
type tokenUse struct {
	g   *tokenGrant // nil when the token was not known at all
	err error       // why it is refused, nil while it is good
	// peerName is the principal the peer itself maps to ("" for none):
	// the records name it beside the token.
	peerName string
	// deny, rule: how the token narrowed the call's decision (set by
	// identify, applied by narrow).
	deny api.Reason
	rule string
}

// tokenID is the id of the token the call presented, "" for none (or for
// a token not known at all): what per-token budgets key on.
func (c *call) tokenID() string {
	if c.tok == nil || c.tok.g == nil {
		return ""
	}
	return c.tok.g.id
}

// ownerName is the principal a call acts for when it begins: a valid
// token's minter, nobody for a refused token, else the peer's principal.
func (c *call) ownerName(m *authz.Manifest) string {
	if c.tok != nil {
		if c.tok.err != nil {
			return ""
		}
		return c.tok.g.minter
	}
	name, _ := m.Identify(callerOf(c.peer))
	return name
}

// identify is docs/design.md §1 step 2: the principal whose rights decide
// the call. Without a token, the peer's; with one, its minter's, and the
// token's narrowing is noted for narrow. A call with a refused token is
// nobody's: nothing is resolved for it and it is denied token_invalid.
func (c *call) identify() {
	if c.tok == nil {
		c.areq.Principal, _ = c.p.m.Identify(callerOf(c.peer))
		return
	}
	t := c.tok
	t.peerName, _ = c.p.m.Identify(callerOf(c.peer))
	t.deny, t.rule = "", ""
	if t.err == nil {
		// Decided again after an approval wait: the token may have been
		// revoked or expired meanwhile.
		t.err = c.d.tokens.check(t.g, c.peer.UID)
	}
	if t.err != nil {
		c.areq.Principal = ""
		t.deny, t.rule = api.ReasonTokenInvalid, "token"
		return
	}
	g := t.g
	c.areq.Principal = g.minter
	if g.task != "" && c.req.Task == "" {
		c.req.Task = g.task // pinned: a call that names no task is the token's
	}
	switch {
	case !slices.Contains(g.tools, c.req.Tool):
		t.deny, t.rule = api.ReasonPrincipalNotAllowed, "token.tools"
	case g.task != "" && c.req.Task != g.task:
		t.deny, t.rule = api.ReasonPrincipalNotAllowed, "token.task"
	}
}

// tokenRefuses says the token denies the call before anything is
// resolved for it.
func (c *call) tokenRefuses() bool { return c.tok != nil && c.tok.deny != "" }

// narrow applies the token's refusal to the decision authz made for the
// minter (a token only ever takes rights away).
func (c *call) narrow() {
	if c.tokenRefuses() {
		c.dec = authz.Decision{Reason: c.tok.deny, Rule: c.tok.rule}
	}
}

// recordName is the principal a record names: the peer's own, also for a
// call made with a token (whose minter the record's token names).
func (c *call) recordName() string {
	if c.tok != nil {
		return c.tok.peerName
	}
	return c.areq.Principal
}

// tokenRef is what the records of a call with a token say of it: never
// the token itself.
func (c *call) tokenRef() *audit.TokenRef {
	if c.tok == nil || c.tok.g == nil {
		return nil
	}
	return &audit.TokenRef{ID: c.tok.g.id, Minter: c.tok.g.minter, Subject: c.tok.g.subject}
}

// presentedToken reads the Authorization header: ok false without one; a
// header that is not "Bearer TOKEN" is a malformed token.
func presentedToken(header string) (tok string, present bool) {
	if header == "" {
		return "", false
	}
	tok, _ = api.BearerToken(header)
	return tok, true
}

// useToken authenticates the token a request presents, nil when it
// presents none. The refusal's cause is logged, never the token.
func (d *Daemon) useToken(header string, peer Peer) *tokenUse {
	tok, present := presentedToken(header)
	if !present {
		return nil
	}
	g, err := d.tokens.authenticate(tok, peer.UID)
	if err != nil {
		id := ""
		if g != nil {
			id = g.id
		}
		d.log.Info("token refused", "why", err.Error(), "token_id", id, "uid", peer.UID, "pid", peer.PID)
	}
	return &tokenUse{g: g, err: err}
}
