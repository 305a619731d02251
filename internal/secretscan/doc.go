// Package secretscan finds secrets in text that leaves the daemon (a file
// read, a search's lines, a command's output, a fetched body) and
// replaces each by "[REDACTED:kind]" (docs/security.md, "Redaction").
//
// Built-in detectors cover PEM private keys (a state machine from the
// BEGIN line through the END line, however long the block), AWS access
// key ids and secret-access-key assignments, GCP service-account keys
// (their private_key is a PEM block), GitHub, GitLab, Slack, Stripe,
// OpenAI, Anthropic and Google API tokens and JWTs; a manifest adds RE2
// patterns of its own (Go's regexp: linear time in the input).
//
// It works on a stream: a Writer holds back only the current line (at
// most MaxSecret+Step bytes of it), so a secret split across two writes
// is still caught, memory stays constant however long the output, and
// the result never depends on where the writes were cut (FuzzStream
// holds it equal to the one-shot Redact). Detectors match within a line:
// a user pattern that could match a line break is refused when it is
// compiled.
//
// It is pure and a leaf on the standard library.
package secretscan
