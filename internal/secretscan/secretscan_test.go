package secretscan

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// Samples of each built-in kind. None is a live credential: the AWS pair
// is AWS's documented example, the rest are made of filler.
const (
	pemKey = "-----BEGIN RSA PRIVATE KEY-----\n" +
		"MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n" +
		"VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n" +
		"LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo\n" +
		"-----END RSA PRIVATE KEY-----\n"
	encryptedKey = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n" +
		"DEK-Info: AES-128-CBC,2AF25325A9B286F4CBD68ABDE2FB2C65\n\n" +
		"W7K2mZ3xZ8n5xYw6u0u3lq2m1E7s9n5v1z3v8zQ6u9A=\n-----END RSA PRIVATE KEY-----"
	gcpJSON      = `{"type": "service_account", "private_key_id": "abc", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----\n", "client_email": "x@y.iam.gserviceaccount.com"}`
	awsKeyID     = "AKIAIOSFODNN7EXAMPLE"
	awsSTSKeyID  = "ASIAY34FZKBOKMUTVV7A"
	awsSecret    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	ghToken      = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	ghPAT        = "github_pat_11ABCDEFG0123456789abcd_0123456789abcdefghijABCDEFGHIJ0123456789abcdefghijABCDEFGHI"
	slackToken   = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	stripeKey    = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	openAIKey    = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	anthropicKey = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AA"
	jwt          = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	googleKey    = "AIzaSyA-0123456789abcdefghijABCDEFGHIJK"
)

func mustScanner(t testing.TB, builtin bool, pats ...Pattern) *Scanner {
	t.Helper()
	s, err := New(builtin, pats)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func nl(n int) string { return strings.Repeat("\n", n) }

// redactCases is the one table of what a scanner with the built-ins
// and the pattern {ticket: TCK-[0-9]{6}} makes of an input.
var redactCases = []struct {
	name, in, want string
	counts         Counts
}{
	{"clean", "nothing to see here\nat all", "nothing to see here\nat all", Counts{}},
	{"pem keeps its line count", "a\n" + pemKey + "b\n", "a\n[REDACTED:private_key]" + nl(5) + "b\n", Counts{KindPrivateKey: 1}},
	{"encrypted pem", encryptedKey + "\nafter", "[REDACTED:private_key]" + nl(5) + "\nafter", Counts{KindPrivateKey: 1}},
	{"pem without an end line runs to the end", "x " + pemKey[:100], "x [REDACTED:private_key]" + nl(2), Counts{KindPrivateKey: 1}},
	{"pem quoted in code stops at the quote", `if s == "-----BEGIN RSA PRIVATE KEY-----" { return }`, `if s == "[REDACTED:private_key]" { return }`, Counts{KindPrivateKey: 1}},
	{"public key is no secret", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----\n", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----\n", Counts{}},
	{"gcp service account", gcpJSON, `{"type": "service_account", "private_key_id": "abc", "private_key": "[REDACTED:private_key]\n", "client_email": "x@y.iam.gserviceaccount.com"}`, Counts{KindPrivateKey: 1}},
	{"aws key id", "id=" + awsKeyID + "\n", "id=[REDACTED:aws_access_key_id]\n", Counts{KindAWSAccessKeyID: 1}},
	{"aws sts key id", awsSTSKeyID, "[REDACTED:aws_access_key_id]", Counts{KindAWSAccessKeyID: 1}},
	{"aws key id inside a word", "X" + awsKeyID + " " + awsKeyID + "Z", "X" + awsKeyID + " " + awsKeyID + "Z", Counts{}},
	{"aws credentials file", "[default]\naws_access_key_id = " + awsKeyID + "\naws_secret_access_key = " + awsSecret + "\n",
		"[default]\naws_access_key_id = [REDACTED:aws_access_key_id]\naws_secret_access_key = [REDACTED:aws_secret_access_key]\n",
		Counts{KindAWSAccessKeyID: 1, KindAWSSecretAccessKey: 1}},
	{"aws env file, unquoted", "AWS_SECRET_ACCESS_KEY=" + awsSecret + "\nexport AWS_SECRET_ACCESS_KEY=" + awsSecret + "\n",
		"AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]\nexport AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]\n", Counts{KindAWSSecretAccessKey: 2}},
	{"aws env and json", "export AWS_SECRET_ACCESS_KEY=\"" + awsSecret + "\"\n{\"SecretAccessKey\": \"" + awsSecret + "\"}",
		"export AWS_SECRET_ACCESS_KEY=\"[REDACTED:aws_secret_access_key]\"\n{\"SecretAccessKey\": \"[REDACTED:aws_secret_access_key]\"}",
		Counts{KindAWSSecretAccessKey: 2}},
	{"github", ghToken + " " + ghPAT, "[REDACTED:github_token] [REDACTED:github_token]", Counts{KindGitHubToken: 2}},
	{"slack", "token: " + slackToken, "token: [REDACTED:slack_token]", Counts{KindSlackToken: 1}},
	{"stripe", stripeKey, "[REDACTED:stripe_key]", Counts{KindStripeKey: 1}},
	{"openai and anthropic", openAIKey + "\n" + anthropicKey, "[REDACTED:openai_key]\n[REDACTED:anthropic_key]", Counts{KindOpenAIKey: 1, KindAnthropicKey: 1}},
	{"task- is not a key", "task-0123456789abcdefghijklmnop", "task-0123456789abcdefghijklmnop", Counts{}},
	{"google", "key=" + googleKey, "key=[REDACTED:google_api_key]", Counts{KindGoogleAPIKey: 1}},
	{"jwt", "Authorization: Bearer " + jwt + "\n", "Authorization: Bearer [REDACTED:jwt]\n", Counts{KindJWT: 1}},
	{"custom pattern", "see TCK-123456 and TCK-12345", "see [REDACTED:ticket] and TCK-12345", Counts{"ticket": 1}},
	{"adjacent secrets", awsKeyID + "\n" + awsKeyID, "[REDACTED:aws_access_key_id]\n[REDACTED:aws_access_key_id]", Counts{KindAWSAccessKeyID: 2}},
	{"crlf", "a\r\n" + strings.ReplaceAll(pemKey, "\n", "\r\n") + jwt + "\r\n", "a\r\n[REDACTED:private_key]" + strings.Repeat("\r\n", 5) + "[REDACTED:jwt]\r\n", Counts{KindPrivateKey: 1, KindJWT: 1}},
}

var ticket = Pattern{Name: "ticket", Regex: `TCK-[0-9]{6}`}

func TestRedact(t *testing.T) {
	s := mustScanner(t, true, ticket)
	for _, c := range redactCases {
		got, counts := s.Redact([]byte(c.in))
		if string(got) != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
		if !equalCounts(counts, c.counts) {
			t.Errorf("%s: counts %v, want %v", c.name, counts, c.counts)
		}
	}
}

func equalCounts(a, b Counts) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSplitAtEveryOffset: every table input written in two pieces cut at
// every offset, and byte by byte, gives the one-shot result.
func TestSplitAtEveryOffset(t *testing.T) {
	s := mustScanner(t, true, ticket)
	for _, c := range redactCases {
		want, wantCounts := s.Redact([]byte(c.in))
		for cut := 0; cut <= len(c.in); cut++ {
			got, counts := streamed(s, []byte(c.in), []int{cut})
			if !bytes.Equal(got, want) || !equalCounts(counts, wantCounts) {
				t.Fatalf("%s cut at %d:\n got %q %v\nwant %q %v", c.name, cut, got, counts, want, wantCounts)
			}
		}
		var every []int
		for i := 1; i < len(c.in); i++ {
			every = append(every, i)
		}
		if got, _ := streamed(s, []byte(c.in), every); !bytes.Equal(got, want) {
			t.Fatalf("%s byte by byte:\n got %q\nwant %q", c.name, got, want)
		}
	}
}

// streamed writes in to a Writer cut at the offsets cuts (ascending).
func streamed(s *Scanner, in []byte, cuts []int) ([]byte, Counts) {
	var out bytes.Buffer
	w := s.NewWriter(&out)
	prev := 0
	for _, c := range cuts {
		w.Write(in[prev:c])
		prev = c
	}
	w.Write(in[prev:])
	w.Flush()
	return out.Bytes(), w.Counts()
}

// TestLongLine: on a line far longer than the window, a secret up to
// MaxSecret bytes is caught wherever it lies relative to the windows'
// edges, however the line is cut into writes.
func TestLongLine(t *testing.T) {
	long := Pattern{Name: "long", Regex: `LONG\{[a-z]+\}`}
	s := mustScanner(t, true, long)
	longSecret := "LONG{" + strings.Repeat("q", MaxSecret-6) + "}"
	if len(longSecret) != MaxSecret {
		t.Fatal("bad test secret")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, secret := range []string{awsKeyID, jwt, longSecret} {
		for _, at := range []int{0, 1, Step - len(secret), Step - 1, Step, Step + 1, window - len(secret), window - 1, window, 2*Step - 3, 3*Step + 7} {
			in := []byte(strings.Repeat("a b ", 30<<10)) // 120 KiB, no line break
			copy(in[at:], " "+secret+" ")
			want, counts := s.Redact(in)
			if bytes.Contains(want, []byte(secret)) || counts.Total() != 1 {
				t.Fatalf("secret of %d bytes at %d: not caught (counts %v)", len(secret), at, counts)
			}
			for range 5 {
				cuts := randomCuts(rng, len(in))
				if got, _ := streamed(s, in, cuts); !bytes.Equal(got, want) {
					t.Fatalf("secret at %d, cuts %v: streamed differs from one-shot", at, cuts)
				}
			}
		}
	}
}

func randomCuts(rng *rand.Rand, n int) []int {
	var cuts []int
	for p := rng.IntN(4096) + 1; p < n; p += rng.IntN(40<<10) + 1 {
		cuts = append(cuts, p)
	}
	return cuts
}

// TestLongPEM: a PEM block far longer than the window is dropped whole,
// its line breaks kept.
func TestLongPEM(t *testing.T) {
	s := mustScanner(t, true)
	body := strings.Repeat("MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n", 2000) // 130 KiB
	in := "head\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + body + "-----END OPENSSH PRIVATE KEY-----\ntail\n"
	want := "head\n[REDACTED:private_key]\n" + nl(2000) + "\ntail\n"
	got, counts := s.Redact([]byte(in))
	if string(got) != want || counts[KindPrivateKey] != 1 {
		t.Fatalf("got %d bytes %q…, counts %v", len(got), got[:min(len(got), 80)], counts)
	}
	// One long escaped line (a key inside a JSON string).
	esc := `{"k": "-----BEGIN PRIVATE KEY-----\n` + strings.ReplaceAll(body, "\n", `\n`) + `-----END PRIVATE KEY-----\n"}`
	got, _ = s.Redact([]byte(esc))
	if string(got) != `{"k": "[REDACTED:private_key]\n"}` {
		t.Fatalf("escaped: got %q…", got[:min(len(got), 80)])
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		if g, _ := streamed(s, []byte(esc), randomCuts(rng, len(esc))); !bytes.Equal(g, got) {
			t.Fatal("escaped PEM streamed differs from one-shot")
		}
	}
}

// TestConstantMemory: 64 MiB through a Writer, as short lines and as one
// line, holds no more than the window.
func TestConstantMemory(t *testing.T) {
	s := mustScanner(t, true, ticket)
	for _, unit := range []string{"2024-01-01 INFO request served in 3ms id=" + awsKeyID + "\n", "abcdefgh "} {
		w := s.NewWriter(io.Discard)
		chunk := []byte(strings.Repeat(unit, (32<<10)/len(unit)))
		for n := 0; n < 64<<20; n += len(chunk) {
			w.Write(chunk)
			if cap(w.pend) > window || cap(w.out) > 2*window {
				t.Fatalf("holding %d (pend) + %d (out) bytes after %d", cap(w.pend), cap(w.out), n)
			}
		}
		w.Flush()
	}
}

func TestPatternErrors(t *testing.T) {
	for _, c := range []struct {
		p    Pattern
		want error
	}{
		{Pattern{"Bad", "x"}, ErrBadName},
		{Pattern{"", "x"}, ErrBadName},
		{Pattern{"a", "^x"}, ErrAnchor},
		{Pattern{"a", `x\b`}, ErrAnchor},
		{Pattern{"a", `x$`}, ErrAnchor},
		{Pattern{"a", "x\ny"}, ErrLineBreak},
		{Pattern{"a", `[\n]`}, ErrLineBreak},
		{Pattern{"a", "x*"}, ErrEmpty},
		{Pattern{"a", "(x"}, nil},
	} {
		_, err := New(false, []Pattern{c.p})
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%+v: %v, want %v", c.p, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "patterns[0]") {
			t.Errorf("%+v: %v does not name the pattern", c.p, err)
		}
	}
}

// TestPatternStaysOnItsLine: a class or dot never crosses a line break.
func TestPatternStaysOnItsLine(t *testing.T) {
	s := mustScanner(t, false, Pattern{"pw", `password=[^,]+`}, Pattern{"dot", `(?s)DOT.+`})
	got, _ := s.Redact([]byte("password=hunter2\nnext line, kept\nDOT here\nkept"))
	if string(got) != "[REDACTED:pw]\nnext line, kept\n[REDACTED:dot]\nkept" {
		t.Fatalf("got %q", got)
	}
}

func TestNoDetectors(t *testing.T) {
	s := mustScanner(t, false)
	in := "AKIAIOSFODNN7EXAMPLE\n"
	if got, c := s.Redact([]byte(in)); string(got) != in || c.Total() != 0 {
		t.Fatalf("got %q %v", got, c)
	}
}

// TestBuiltinsHavePrefixes: every built-in begins with a literal, which
// is what keeps clean text cheap (see builtins).
func TestBuiltinsHavePrefixes(t *testing.T) {
	for _, d := range builtins {
		if p, _ := d.re.LiteralPrefix(); len(p) < 2 {
			t.Errorf("%s %s: literal prefix %q", d.kind, d.re, p)
		}
	}
}

// FuzzStream: however the input is cut into writes, the stream gives
// the one-shot result and counts.
func FuzzStream(f *testing.F) {
	for _, c := range redactCases {
		f.Add([]byte(c.in), []byte{3, 17, 1})
	}
	f.Add([]byte(strings.Repeat("x", window+10)+awsKeyID), []byte{255, 255, 255})
	s := mustScanner(f, true, ticket, Pattern{"dot", `D.{0,3}T`})
	f.Fuzz(func(t *testing.T, in, cutSeed []byte) {
		want, wantCounts := s.Redact(in)
		var cuts []int
		p := 0
		for _, c := range cutSeed {
			p += int(c)*int(c) + 1
			if p >= len(in) {
				break
			}
			cuts = append(cuts, p)
		}
		got, counts := streamed(s, in, cuts)
		if !bytes.Equal(got, want) || !equalCounts(counts, wantCounts) {
			t.Fatalf("cuts %v:\n got %q %v\nwant %q %v", cuts, got, counts, want, wantCounts)
		}
	})
}
