package bench

import (
	"context"
	"testing"
	"time"
)

// The fleet in DNS-discovery mode: plain engines on their own loopback
// addresses, found by the router through a DNS server, their KV events
// over ZMQ. The repeated shared prefix lands where it is cached.
func TestDNSDiscoveredFleet(t *testing.T) {
	ctx := context.Background()
	opts := fastFleetOptions(3)
	opts.Discovery = DiscoveryDNS
	factory, err := EmbeddedFleetFactory(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := factory(ctx, PolicyKVRouter)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close(ctx)
	if urls := fleet.WorkerURLs(); len(urls) != 3 || urls[0] == urls[1] {
		t.Fatalf("worker URLs %v", urls)
	}
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 1, PromptsPerGroup: 1, SystemTokens: 512, QuestionTokens: 8, OutputTokens: 2}, 6, 1)
	reqs, _ := PoissonSchedule(prompts, 50, 1)
	for i := range reqs {
		reqs[i].Arrival = time.Duration(i) * 150 * time.Millisecond // each one's KV events arrive before the next
	}
	d, err := NewDispatcher(PolicyKVRouter, fleet.RouterURLs(), fleet.WorkerURLs(), 1)
	if err != nil {
		t.Fatal(err)
	}
	results := Run(ctx, reqs, d, &Client{HTTP: newHTTPClient(), Model: "mock-model"}, 10*time.Second)
	p := Summarize(PolicyKVRouter, 50, results)
	if p.Errors != 0 {
		t.Fatalf("errors: %v", results[0].Err)
	}
	if p.HitRate < 0.5 {
		t.Fatalf("hit rate %v: the router did not follow the engines' ZMQ events", p.HitRate)
	}
	if err := fleet.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}
