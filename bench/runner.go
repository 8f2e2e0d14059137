package bench

import (
	"context"
	"math"
	"sync"
	"time"
)

// Run offers reqs open-loop: each request is sent at its arrival offset
// from the start, whatever is still in flight, through the dispatcher's
// pick. It returns one result per request in input order once all have
// finished; a cancelled ctx fails the requests not yet done.
func Run(ctx context.Context, reqs []Request, d Dispatcher, c *Client, timeout time.Duration) []Result {
	out := make([]Result, len(reqs))
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, r := range reqs {
		if wait := time.Until(start.Add(r.Arrival)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			url, release := d.Acquire()
			defer release()
			out[i] = c.Do(rctx, url, r)
		}()
	}
	wg.Wait()
	return out
}

// Summarize reduces one run's results to a report point.
func Summarize(policy string, qps float64, results []Result) Point {
	p := Point{Name: policy, QPS: qps}
	var ttfts, itls []time.Duration
	var prompt, cached, output int
	var first, last time.Time
	for _, r := range results {
		if r.Err != nil {
			p.Errors++
			continue
		}
		ttfts = append(ttfts, r.TTFT)
		itls = append(itls, r.ITLs...)
		output += r.OutputTokens
		if r.HasUsage {
			prompt += r.PromptTokens
			cached += r.CachedTokens
		}
		if first.IsZero() || r.Start.Before(first) {
			first = r.Start
		}
		if r.End.After(last) {
			last = r.End
		}
	}
	if prompt > 0 {
		p.HitRate = float64(cached) / float64(prompt)
	}
	tt := millis(ttfts)
	p.TTFTP50 = finite(Percentile(tt, 50))
	p.TTFTP90 = finite(Percentile(tt, 90))
	p.TTFTP99 = finite(Percentile(tt, 99))
	il := millis(itls)
	p.ITLP50 = finite(Percentile(il, 50))
	p.ITLP90 = finite(Percentile(il, 90))
	if span := last.Sub(first).Seconds(); span > 0 {
		p.ThroughputTokS = float64(output) / span
	}
	return p
}

// finite maps NaN (no samples) to 0 so the point stays valid JSON.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}
