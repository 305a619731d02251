package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
)

// now is the clock a pending line counts down from; a variable, for tests.
var now = time.Now

// pendingLine is what `sluice call` prints on stderr when its call waits
// for a human: the approval id, how long it may wait, and what an
// approver runs.
func pendingLine(ev *api.Event) string {
	id := safeLine(ev.ApprovalID)
	if t, err := time.Parse(time.RFC3339Nano, ev.ExpiresAt); err == nil {
		wait := max(t.Sub(now()), 0).Round(time.Second)
		return fmt.Sprintf("sluice: waiting for approval %s (expires in %s); an approver runs: sluice approve %s", id, wait, id)
	}
	return fmt.Sprintf("sluice: waiting for approval %s (an approver runs: sluice approve %s)", id, id)
}

// callTelling is a call that is not streamed for its caller, streamed
// under the hood so that a wait for a human is said on stderr (a
// terminal) at once, not after up to five minutes of silence. The
// output is collected, and the result made what the daemon gives an
// unstreamed call: output (or output_b64), stderr.
func callTelling(ctx context.Context, c *client.Client, req api.CallRequest, stderr io.Writer) (*api.CallResult, error) {
	req.Stream = true
	var out, errOut bytes.Buffer
	res, err := c.Stream(ctx, req, func(ev api.Event) error {
		switch {
		case ev.Event == api.EventDecision && ev.Verdict == api.VerdictPending:
			fmt.Fprintln(stderr, pendingLine(&ev))
		case ev.Event == api.EventOutput:
			w := &out
			if ev.Stream == "stderr" {
				w = &errOut
			}
			if ev.DataB64 != "" {
				b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
				w.Write(b)
			} else {
				w.WriteString(ev.Data)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res.Output == nil && res.OutputB64 == "" && (out.Len() > 0 || res.OK) {
		if utf8.Valid(out.Bytes()) {
			s := out.String()
			res.Output = &s
		} else {
			res.OutputB64 = base64.StdEncoding.EncodeToString(out.Bytes())
		}
	}
	if res.Stderr == "" {
		res.Stderr = errOut.String()
	}
	return res, nil
}

// denialLine is what `sluice call` prints on stderr for a denied call:
// the reason, what the daemon says more of it (detail: "argv is
// required: …"), and the approver's note, each escaped for a terminal.
func denialLine(res *api.CallResult) string {
	msg := "sluice: denied: " + string(res.Reason)
	if res.Detail != "" {
		msg += ": " + safeLine(res.Detail)
	}
	if res.ApprovalNote != "" {
		msg += fmt.Sprintf(" (the approver's note: %s)", safeLine(res.ApprovalNote))
	}
	return msg
}

// printApprovalNote prints, for an allowed call a human approved with a
// note, the note on stderr.
func printApprovalNote(w io.Writer, res *api.CallResult) {
	if res.Verdict == api.VerdictAllow && res.ApprovalNote != "" {
		fmt.Fprintf(w, "sluice: approved; the approver's note: %s\n", safeLine(res.ApprovalNote))
	}
}
