package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/api"
)

// ClearCache drops an execute tool's caches (docs/manifest.md, `cache`):
// the caller's own, or every principal's when the caller is an approver.
// A tool without caches is a 400 APIError, an unknown one a 404.
func (c *Client) ClearCache(ctx context.Context, tool string) (*api.CacheCleared, error) {
	var r api.CacheCleared
	return &r, c.getJSON(ctx, http.MethodPost, "/v1/caches/"+url.PathEscape(tool)+"/clear", nil, &r)
}
