package bench

import (
	"context"
	"time"
)

// LoadResult is what a workload sent to a running router (or the load
// balancer in front of several) achieved.
type LoadResult struct {
	Point
	Requests int `json:"requests"`
	// Cut: requests whose connection failed or whose stream ended
	// without [DONE] at least once. Resent: of them, sent again as they
	// were (no text had arrived); Resumed: streams continued from the
	// text received. A cut request that then succeeded is not an error.
	Cut     int `json:"cut"`
	Resent  int `json:"resent"`
	Resumed int `json:"resumed"`
	// FirstErr is the first failed request's error, if any failed.
	FirstErr string `json:"first_error,omitempty"`
}

// LoadOptions are how RunLoad sends its requests.
type LoadOptions struct {
	Model string
	// Unary asks for whole completions instead of streams.
	Unary bool
	// Timeout bounds one request (default 2 minutes).
	Timeout time.Duration
	// Resumes: Client.Resumes.
	Resumes int
}

// RunLoad sends reqs open-loop as completions (streamed, or whole when
// unary) to target's /v1/completions (a replica's proxy or a load balancer
// in front of several) and summarises them. It fails nothing itself:
// errors are counted in the result.
func RunLoad(ctx context.Context, target string, reqs []Request, qps float64, o LoadOptions) LoadResult {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	client := &Client{HTTP: newHTTPClient(), Model: o.Model, Unary: o.Unary, Resumes: o.Resumes}
	defer client.HTTP.CloseIdleConnections()
	results := Run(ctx, reqs, fixed(target), client, o.Timeout)
	out := LoadResult{Point: Summarize("external", qps, results), Requests: len(results)}
	for _, r := range results {
		if r.Cuts > 0 {
			out.Cut++
		}
		if r.Resent > 0 {
			out.Resent++
		}
		if r.Resumed > 0 {
			out.Resumed++
		}
		if r.Err != nil && out.FirstErr == "" {
			out.FirstErr = r.Err.Error()
		}
	}
	return out
}
