package bench

import (
	"context"
	"time"
)

// LoadResult is what a workload sent to a running router (or the load
// balancer in front of several) achieved.
type LoadResult struct {
	Point
	Requests int
	// FirstErr is the first failed request's error, if any failed.
	FirstErr string
}

// RunLoad sends reqs open-loop as completions (streamed, or whole when
// unary) to target's /v1/completions (a replica's proxy or a load balancer
// in front of several) and summarises them. It fails nothing itself:
// errors are counted in the result.
func RunLoad(ctx context.Context, target string, reqs []Request, qps float64, model string, unary bool, timeout time.Duration) LoadResult {
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	client := &Client{HTTP: newHTTPClient(), Model: model, Unary: unary}
	defer client.HTTP.CloseIdleConnections()
	results := Run(ctx, reqs, fixed(target), client, timeout)
	out := LoadResult{Point: Summarize("external", qps, results), Requests: len(results)}
	for _, r := range results {
		if r.Err != nil {
			out.FirstErr = r.Err.Error()
			break
		}
	}
	return out
}
