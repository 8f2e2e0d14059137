package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DecisionLoadConfig is a closed-loop load of routing decisions over the
// /route API: each client repeatedly makes the three calls one request
// costs a router (route with update_states, prefill_done, free), so every
// decision also causes three gossiped events on every peer replica.
type DecisionLoadConfig struct {
	// URLs are replica base URLs; client i always talks to URLs[i%len]
	// (a client-side round-robin load balancer with sticky connections).
	URLs []string
	// Clients is the number of concurrent closed-loop clients.
	Clients int
	// Warmup is run and discarded before Duration is measured.
	Warmup, Duration time.Duration
	// Prompts are the token-id prompts, used in turn.
	Prompts [][]uint32
}

// DecisionLoadResult is what a measured window achieved.
type DecisionLoadResult struct {
	Decisions int64
	Errors    int64
	FirstErr  string
	Elapsed   time.Duration
	// Route latency percentiles (the /route call alone).
	RouteP50, RouteP99 time.Duration
}

// PerSec is decisions per second.
func (r DecisionLoadResult) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

// RunDecisionLoad runs the load; a failed call is counted, not fatal.
func RunDecisionLoad(ctx context.Context, cfg DecisionLoadConfig) (DecisionLoadResult, error) {
	if len(cfg.URLs) == 0 || cfg.Clients < 1 || len(cfg.Prompts) == 0 || cfg.Duration <= 0 {
		return DecisionLoadResult{}, errors.New("decision load: need URLs, clients, prompts and a duration")
	}
	tokens := make([][]byte, len(cfg.Prompts))
	for i, p := range cfg.Prompts {
		tokens[i] = appendTokenJSON(nil, p)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Clients
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()

	// Ids are unique per run, so runs against the same replicas never
	// collide with each other's requests.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var measuring atomic.Bool
	var decisions, failures atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, cfg.Clients)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := cfg.URLs[c%len(cfg.URLs)]
			var body []byte
			for i := 0; runCtx.Err() == nil; i++ {
				id := run + "-c" + strconv.Itoa(c) + "-" + strconv.Itoa(i)
				start := time.Now()
				err := decide(runCtx, client, url, id, tokens[(c+i)%len(tokens)], &body)
				if runCtx.Err() != nil {
					return
				}
				if !measuring.Load() {
					continue
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				decisions.Add(1)
				lat[c] = append(lat[c], time.Since(start))
			}
		}()
	}
	select {
	case <-time.After(cfg.Warmup):
	case <-ctx.Done():
	}
	measuring.Store(true)
	begin := time.Now()
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	measuring.Store(false)
	res := DecisionLoadResult{Decisions: decisions.Load(), Errors: failures.Load(), Elapsed: time.Since(begin)}
	stop()
	wg.Wait()
	if s, ok := firstErr.Load().(string); ok {
		res.FirstErr = s
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if n := len(all); n > 0 {
		res.RouteP50, res.RouteP99 = all[n/2], all[min(n-1, n*99/100)]
	}
	return res, ctx.Err()
}

// decide makes one request's three calls; body is a reused buffer.
func decide(ctx context.Context, c *http.Client, url, id string, tokens []byte, body *[]byte) error {
	b := append((*body)[:0], `{"request_id":"`...)
	b = append(b, id...)
	b = append(b, `","update_states":true,"token_ids":`...)
	b = append(b, tokens...)
	b = append(b, '}')
	*body = b
	if err := post(ctx, c, url+"/route", b); err != nil {
		return err
	}
	// A routed request is always finished, even when the load stops in
	// between: an abandoned one would weigh on the worker until expiry.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	idBody := []byte(`{"request_id":"` + id + `"}`)
	if err := post(fctx, c, url+"/prefill_done", idBody); err != nil {
		return err
	}
	return post(fctx, c, url+"/free", idBody)
}

func post(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d", url, resp.StatusCode)
	}
	return nil
}

func appendTokenJSON(b []byte, toks []uint32) []byte {
	b = append(b, '[')
	for i, t := range toks {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	return append(b, ']')
}
