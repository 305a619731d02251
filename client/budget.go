package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/api"
)

// ResetBudget gives a principal its whole rate and denial budget back
// (POST /v1/budgets/{principal}/reset; approvers only: a 403 APIError
// otherwise, a 404 for a principal without budgets).
func (c *Client) ResetBudget(ctx context.Context, principal string) (*api.BudgetReset, error) {
	var r api.BudgetReset
	return &r, c.getJSON(ctx, http.MethodPost, "/v1/budgets/"+url.PathEscape(principal)+"/reset", nil, &r)
}
