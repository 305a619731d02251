package authz

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/api"
)

// opPost sends a JSON body to a webhook, performed by sluiced: args
// {"url", "body"}. The URL must match a webhooks glob (scheme and host
// exact, path by glob); the address checks and pinned dialing are
// fetch's; redirects are not followed. The ledger keeps the body's digest
// and length; an approver sees the body itself.
var opPost = Op{
	Name:     api.OpPost,
	Keys:     []string{"webhooks", "max_request_bytes", "schemes", "insecure_allow_private", "timeout_ms"},
	Resolve:  ResolveNet,
	Effects:  true,
	Binds:    true,
	validate: []validator{validateNet},
	decode: func(t *Tool, raw []byte, a *Args) error {
		var pa api.PostArgs
		if err := strictArgs(raw, &pa); err != nil {
			return err
		}
		a.URL = pa.URL
		if len(pa.Body) > 0 {
			a.Body = pa.Body
		}
		a.BodyBytes = int64(len(a.Body))
		a.Bound = a.Body
		switch {
		case pa.URL == nil:
			a.Invalid = "args.url: required"
		case a.Body == nil:
			a.Invalid = "args.body: required (any JSON value)"
		}
		rec := map[string]any{"body_sha256": sha256Of(a.Body), "body_len": len(a.Body)}
		if pa.URL != nil {
			recordNetURL(rec, *pa.URL, true)
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
		a.URL = ra.replayURL(ra.URL, hooks, true)
		if ra.BodyLen != nil {
			a.BodyBytes = *ra.BodyLen
		}
		return true
	},
	decide: func(t *Tool, ix *toolIndex, req *Request) Decision {
		tgt, rule, err := t.net.AuthorizeWebhook(derefURL(req.URL))
		if err != nil {
			return deny(api.ReasonEgressDenied, ix.key+".webhooks")
		}
		if req.BodyBytes > t.net.MaxRequestBytes() {
			return deny(api.ReasonLimitExceeded, ix.key+".max_request_bytes")
		}
		return decideAddrs(t, ix, req, tgt, ruleKey(ix, rule))
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
	show: func(t *Tool, a *Args, ch *api.ApprovalChange) {
		ch.Summary = append(ch.Summary, api.ChangeField{Label: "method", Value: "POST"})
		if a.URL != nil {
			ch.URL = *a.URL
			ch.Summary = append(ch.Summary, api.ChangeField{Label: "url", Value: *a.URL})
		}
		ch.BodyBytes, ch.BodySHA256 = int64(len(a.Body)), sha256Of(a.Body)
	},
	describe: func(t *Tool) string {
		return fmt.Sprintf("Post a JSON body to %s.", strings.Join(t.Webhooks, ", "))
	},
}
