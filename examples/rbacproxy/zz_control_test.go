package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/internal/reliability"
)

func TestControlNoAttack(t *testing.T) {
	e := newEnv(t)
	proc := clitest.Start(t, e.args(fmt.Sprintf("--max-connections=%d", reliability.Budget))...)
	url := proc.Addr + "/metrics"
	keepAlive := reliability.KeepAliveClient()
	scrape := func(client *http.Client) func(ctx context.Context) error {
		return func(ctx context.Context) error { return reliability.HTTPGet(client, url, "Bearer "+e.scraper, 200)(ctx) }
	}
	n, x := reliability.Measure(t.Context(), floodRun, func(ctx context.Context) { <-ctx.Done() }, scrape(reliability.NewConnectionClient()), scrape(keepAlive))
	t.Logf("none: new %v", n.Summary(reliability.Bound))
	t.Logf("none: existing %v", x.Summary(reliability.Bound))
}
