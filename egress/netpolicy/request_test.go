package netpolicy

import (
	"errors"
	"testing"
)

// TestAuthorizeRequest: a fetch's or post's request is made once from a
// parsed URL — the Target itself, its rule, the method and the headers
// under their canonical names — and a refusal names the key that refused
// it; a method other than GET or HEAD is an invalid request.
func TestAuthorizeRequest(t *testing.T) {
	p := mustPolicy(t, Config{Hosts: []string{"api.example.com"}, AllowedHeaders: []string{"Accept", "X-Api-Key"},
		Webhooks: []string{"https://hooks.example.com/h/*"}})
	tg, err := ParseURL("https://API.example.com/v1?q=1#frag")
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.AuthorizeFetch(tg, "HEAD", map[string]string{"x-api-key": "k"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Target() != tg || r.Target().String() != "https://api.example.com/v1?q=1" || r.Method() != "HEAD" ||
		r.Rule().Key != "hosts" || len(r.Headers()) != 1 || r.Headers()["X-Api-Key"] != "k" {
		t.Fatalf("request %+v %v %s %v", r.Target(), r.Rule(), r.Method(), r.Headers())
	}
	r.Headers()["Host"] = "evil.example" // a copy: the request is not changed
	if _, ok := r.Headers()["Host"]; ok {
		t.Fatal("Headers handed out the request's own map")
	}
	hook, _ := ParseURL("https://hooks.example.com/h/x")
	other, _ := ParseURL("https://evil.example.com/")
	dots, _ := ParseURL("https://hooks.example.com/h/..;/admin")
	for _, c := range []struct {
		name string
		err  error
		key  string
	}{
		{"host", second(p.AuthorizeFetch(other, "GET", nil)), "hosts"},
		{"header", second(p.AuthorizeFetch(tg, "GET", map[string]string{"Authorization": "x"})), "allowed_headers"},
		{"header CRLF", second(p.AuthorizeFetch(tg, "GET", map[string]string{"Accept": "a\r\nX: y"})), "allowed_headers"},
		{"no URL", second(p.AuthorizeFetch(nil, "GET", nil)), "hosts"},
		{"a post to a host", second(p.AuthorizePost(tg)), "webhooks"},
		{"path trick", second(p.AuthorizePost(dots)), "webhooks"},
		{"no URL post", second(p.AuthorizePost(nil)), "webhooks"},
	} {
		var de *DeniedError
		if !errors.As(c.err, &de) || de.Key != c.key {
			t.Errorf("%s: %v, want a refusal by %s", c.name, c.err, c.key)
		}
	}
	for _, m := range []string{"", "POST", "DELETE", "get"} {
		if _, err := p.AuthorizeFetch(tg, m, nil); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("method %q: %v, want an invalid request", m, err)
		}
	}
	r, err = p.AuthorizePost(hook)
	if err != nil || r.Method() != "POST" || r.Rule().Key != "webhooks" || len(r.Headers()) != 0 {
		t.Fatalf("post: %v %+v", err, r)
	}
}

func second(_ *Request, err error) error { return err }
