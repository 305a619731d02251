package secretscan

import "regexp"

// Kinds of the built-in detectors, as markers and records name them.
const (
	KindPrivateKey         = "private_key"
	KindAWSAccessKeyID     = "aws_access_key_id"
	KindAWSSecretAccessKey = "aws_secret_access_key"
	KindGitHubToken        = "github_token"
	KindGitLabToken        = "gitlab_token"
	KindSlackToken         = "slack_token"
	KindStripeKey          = "stripe_key"
	KindOpenAIKey          = "openai_key"
	KindAnthropicKey       = "anthropic_key"
	KindGoogleAPIKey       = "google_api_key"
	KindJWT                = "jwt"
)

func charset(s string) *[256]bool {
	var t [256]bool
	for i := 0; i < len(s); i++ {
		t[s[i]] = true
	}
	return &t
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

var (
	// wordAlnum: an id made of letters and digits is not one when more of
	// them touch it.
	wordAlnum = charset(alnum)
	// wordToken: the same for tokens that also hold _ and -.
	wordToken = charset(alnum + "_-")
	// wordB64: a base64 value.
	wordB64 = charset(alnum + "+/=")
)

// builtins are the shapes a secret of a well-known kind has. Each regex
// begins with a literal (Go's regexp then skips to it with a vectorized
// search, so clean text costs a few scans), and none matches a line
// break. Where two match at the same place the longer wins, then the
// earlier in this list.
var builtins = func() []*detector {
	d := func(kind, expr string, word *[256]bool) *detector {
		return prefixed(&detector{kind: kind, re: regexp.MustCompile(expr), word: word})
	}
	assign := func(name string) *detector {
		// The value of an assignment, in env files, INI (~/.aws/
		// credentials), YAML, JSON and code; its name stays.
		return prefixed(&detector{
			kind:  KindAWSSecretAccessKey,
			re:    regexp.MustCompile(name + `["']?[ \t]*(?::=|=>|=|:)[ \t]*["']?([A-Za-z0-9/+]{40})`),
			group: 1, word: wordB64,
		})
	}
	var gh []*detector
	for _, c := range "pousr" {
		gh = append(gh, d(KindGitHubToken, `gh`+string(c)+`_[A-Za-z0-9]{36,}`, wordAlnum))
	}
	return append(gh, []*detector{
		// The BEGIN line of a PEM private key (PKCS#1, PKCS#8, EC,
		// OpenSSH, encrypted, PGP); the block is pemBody's.
		prefixed(&detector{kind: KindPrivateKey, re: regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----`), pem: true}),
		d(KindAWSAccessKeyID, `AKIA[A-Z0-9]{16}`, wordAlnum),
		d(KindAWSAccessKeyID, `ASIA[A-Z0-9]{16}`, wordAlnum),
		assign(`secret_access_key`),
		assign(`SECRET_ACCESS_KEY`),
		assign(`SecretAccessKey`),
		assign(`secretAccessKey`),
		d(KindGitHubToken, `github_pat_[A-Za-z0-9_]{50,}`, charset(alnum+"_")),
		d(KindGitLabToken, `glpat-[A-Za-z0-9_-]{20,}`, wordToken),
		d(KindSlackToken, `xox[abposr]-[A-Za-z0-9-]{10,}`, charset(alnum+"-")),
		d(KindStripeKey, `sk_live_[A-Za-z0-9]{16,}`, wordAlnum),
		d(KindStripeKey, `rk_live_[A-Za-z0-9]{16,}`, wordAlnum),
		d(KindAnthropicKey, `sk-ant-[A-Za-z0-9_-]{20,}`, wordToken),
		d(KindOpenAIKey, `sk-[A-Za-z0-9_-]{20,}`, wordToken),
		d(KindGoogleAPIKey, `AIza[0-9A-Za-z_-]{35}`, wordToken),
		d(KindJWT, `eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`, wordToken),
	}...)
}()

// prefixed gives d its literal prefix, searched for with bytes.Index,
// and its regex anchored, run only where the prefix is: a false
// candidate then costs one failed anchored match, not a scan.
func prefixed(d *detector) *detector {
	p, _ := d.re.LiteralPrefix()
	d.prefix = []byte(p)
	d.anchored = regexp.MustCompile(`^(?:` + d.re.String() + `)`)
	return d
}

// pemBodyByte is what a PEM block's body may hold: base64, line breaks
// and indentation, the escapes of a block inside a JSON or code string
// ("\n"), and what its headers (Proc-Type: 4,ENCRYPTED; DEK-Info: …)
// and END line are made of. Any other byte ends the block even without
// its END line, so a BEGIN line quoted in code or prose does not take
// the rest of the output with it.
var pemBodyByte = charset(alnum + "+/=\n\r \t\\:,-")
