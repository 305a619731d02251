package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/egress/netpolicy"
)

// PostArgs are a post's args: {"url", "body"}. Body is the JSON body
// (never in the ledger); BodyBytes its length, what the decision and
// replay see.
type PostArgs struct {
	URL       *string // nil when absent
	Body      []byte
	BodyBytes int64
	recorded  string // the URL as the ledger kept it, when read back from a record
	parsed    parsedURL
}

func (a *PostArgs) Subject() string {
	if a.recorded != "" {
		return a.recorded
	}
	return derefOr(a.URL)
}

// opPost sends a JSON body to a webhook, performed by sluiced: args
// {"url", "body"}. The URL must match a webhooks glob (scheme and host
// exact, path by glob); the address checks and pinned dialing are
// fetch's; redirects are not followed. The ledger keeps the body's digest
// and length; an approver sees the body itself.
var opPost = Op{
	Name:     api.OpPost,
	Hints:    api.ToolHints{},
	Keys:     []string{"webhooks", "max_request_bytes", "schemes", "insecure_allow_private", "timeout_ms", "credentials"},
	Targets:  urlTarget(func(a *PostArgs) *string { return a.URL }),
	when:     whenURLs,
	net:      authorizePost,
	Effects:  true,
	Binds:    true,
	validate: []validator{validateCredentials, validateNet},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var pa api.PostArgs
		if err := strictArgs(raw, &pa); err != nil {
			return err
		}
		p := &PostArgs{URL: pa.URL}
		a.Value = p
		if len(pa.Body) > 0 {
			p.Body = pa.Body
		}
		p.BodyBytes = int64(len(p.Body))
		a.Bound = p.Body
		switch {
		case pa.URL == nil:
			a.Invalid = "args.url: required"
		case p.Body == nil:
			a.Invalid = "args.body: required (any JSON value)"
		}
		rec := map[string]any{"body_sha256": sha256Of(p.Body), "body_len": len(p.Body)}
		if pa.URL != nil {
			p.parsed = parseURL(*pa.URL)
			recordNetURL(rec, *pa.URL, p.parsed.err, true)
		}
		a.Record = RecordArgs(mustJSON(rec))
		return nil
	},
	fromRecord: func(t *Tool, rec []byte, a *Args) bool {
		var ra struct {
			URL     *string `json:"url"`
			BodyLen *int64  `json:"body_len"`
			recordedURL
		}
		if json.Unmarshal(rec, &ra) != nil {
			return false
		}
		var hooks []string
		if t != nil {
			hooks = t.Webhooks
		}
		p := &PostArgs{URL: ra.replayURL(ra.URL, hooks, true), recorded: derefOr(ra.URL)}
		if ra.BodyLen != nil {
			p.BodyBytes = *ra.BodyLen
		}
		a.Value = p
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		pa, ok := argsOf[PostArgs](req)
		if !ok {
			return deny(api.ReasonInternalError, ix.key)
		}
		return decideNet(t, ix, req, authorizePost, "webhooks", func() (Decision, bool) {
			if pa.BodyBytes > t.net.MaxRequestBytes() {
				return deny(api.ReasonLimitExceeded, ix.key+".max_request_bytes"), true
			}
			return Decision{}, false
		})
	},
	schema: func(t *Tool) map[string]any {
		return map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"url", "body"},
			"properties": map[string]any{
				"url":  map[string]any{"type": "string", "description": "A URL matching one of: " + strings.Join(t.Webhooks, ", ")},
				"body": map[string]any{"description": "The JSON body to send"},
			},
		}
	},
	// An approver sees the method, the whole URL and the body's size and
	// digest (what the approval binds); the daemon adds the body itself.
	show: func(t *Tool, a OpArgs, ch *api.ApprovalChange) {
		pa, ok := a.(*PostArgs)
		if !ok {
			return
		}
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "method", Value: "POST"})
		if pa.URL != nil {
			ch.URL = *pa.URL
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "url", Value: *pa.URL})
		}
		ch.BodyBytes, ch.BodySHA256 = int64(len(pa.Body)), sha256Of(pa.Body)
		showCredential(t, pa.URL, &pa.parsed, ch)
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Post a JSON body to %s.", strings.Join(t.Webhooks, ", "))
	},
}

// authorizePost is a post's target: its URL as decode parsed it,
// matched against the webhooks (netpolicy.Policy.AuthorizePost).
func authorizePost(p *netpolicy.Policy, a OpArgs) (*netpolicy.Request, error) {
	pa, ok := a.(*PostArgs)
	if !ok {
		if a != nil {
			return nil, errNoNet
		}
		pa = &PostArgs{}
	}
	t, err := pa.parsed.of(pa.URL)
	if err != nil {
		return nil, err
	}
	return p.AuthorizePost(t)
}
