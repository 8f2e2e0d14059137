package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/kvrouter/kvrouter/scheduling"
)

// Policy names: the contract of report.json.
const (
	// PolicyKVRouter is kvrouter with the router's default cost
	// (scheduling.DefaultRouterCost: --router-cost ttft).
	PolicyKVRouter = "kvrouter"
	// PolicyKVRouterDynamo is kvrouter with Dynamo's cost (--router-cost
	// dynamo: Dynamo's decisions, bit for bit).
	PolicyKVRouterDynamo = "kvrouter_dynamo"
	// PolicyKVRouterApprox is kvrouter in approximate mode
	// (--use-kv-events=false: the cache is predicted from the router's own
	// decisions, engine events are dropped) with Dynamo's cost, set
	// explicitly: approximate mode is Dynamo's, and the cost table
	// measured it with Dynamo's cost.
	PolicyKVRouterApprox = "kvrouter_approx"
	PolicyRoundRobin     = "round_robin"
	PolicyRandom         = "random"
	PolicyLeastLoaded    = "least_loaded"
	PolicyOracle         = "oracle"

	// policyKVRouterTTFT names the ttft cost as a policy of its own; it
	// is refused, since kvrouter runs that cost now.
	policyKVRouterTTFT = "kvrouter_ttft"
)

// AllPolicies lists every policy in report order.
var AllPolicies = []string{PolicyKVRouter, PolicyKVRouterDynamo, PolicyKVRouterApprox, PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded, PolicyOracle}

// IsRouterPolicy reports whether the policy sends requests through a
// kvrouter (whose fleet then needs a router and KV events).
func IsRouterPolicy(policy string) bool {
	return policy == PolicyKVRouter || policy == PolicyKVRouterDynamo || policy == PolicyKVRouterApprox
}

// RouterCost is the --router-cost a router policy runs with ("" for the
// client-side policies).
func RouterCost(policy string) string {
	switch policy {
	case PolicyKVRouter:
		return string(scheduling.DefaultRouterCost)
	case PolicyKVRouterDynamo, PolicyKVRouterApprox:
		return string(scheduling.CostDynamo)
	}
	return ""
}

// RouterUsesKVEvents is the --use-kv-events a router policy runs with:
// false only for approximate mode.
func RouterUsesKVEvents(policy string) bool { return policy != PolicyKVRouterApprox }

// ErrUnknownPolicy is returned for a policy name not in AllPolicies.
var ErrUnknownPolicy = errors.New("unknown policy")

// ParsePolicies splits a comma-separated list, checks every name and
// drops duplicates, keeping the given order.
func ParsePolicies(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		known := false
		for _, k := range AllPolicies {
			known = known || k == p
		}
		if p == policyKVRouterTTFT {
			return nil, fmt.Errorf("%w %q: the ttft cost is the router's default now, so use %s (the default cost, ttft) or %s (Dynamo's cost)",
				ErrUnknownPolicy, p, PolicyKVRouter, PolicyKVRouterDynamo)
		}
		if !known {
			return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownPolicy, p, strings.Join(AllPolicies, ", "))
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the policy list is empty", ErrUnknownPolicy)
	}
	return out, nil
}

// Dispatcher picks where a request goes. Acquire returns the base URL to
// send to and a release function the caller runs once the request is
// over; both are safe for concurrent use.
type Dispatcher interface {
	Acquire() (baseURL string, release func())
}

// NewDispatcher builds the client-side side of a policy. kvrouter sends
// everything to the router, which picks the worker; the others pick among
// the workers directly. oracle is computed, not dispatched.
func NewDispatcher(policy string, routerURLs, workerURLs []string, seed uint64) (Dispatcher, error) {
	if IsRouterPolicy(policy) {
		switch len(routerURLs) {
		case 0:
			return nil, errors.New("kvrouter policy needs a router URL")
		case 1:
			return fixed(routerURLs[0]), nil
		}
		// Several replicas: the client is their load balancer.
		return &roundRobin{urls: append([]string(nil), routerURLs...)}, nil
	}
	if len(workerURLs) == 0 {
		return nil, fmt.Errorf("policy %s needs at least one worker URL", policy)
	}
	urls := append([]string(nil), workerURLs...)
	switch policy {
	case PolicyRoundRobin:
		return &roundRobin{urls: urls}, nil
	case PolicyRandom:
		return &random{urls: urls, r: newRand(seed, 6)}, nil
	case PolicyLeastLoaded:
		return &leastLoaded{urls: urls, inFlight: make([]int, len(urls))}, nil
	case PolicyOracle:
		return nil, errors.New("the oracle policy is computed from the workload, not dispatched")
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownPolicy, policy)
}

func noop() {}

type fixed string

func (f fixed) Acquire() (string, func()) { return string(f), noop }

type roundRobin struct {
	mu   sync.Mutex
	next int
	urls []string
}

func (p *roundRobin) Acquire() (string, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.urls[p.next]
	p.next = (p.next + 1) % len(p.urls)
	return u, noop
}

type random struct {
	mu   sync.Mutex
	r    *rand.Rand
	urls []string
}

func (p *random) Acquire() (string, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.urls[p.r.IntN(len(p.urls))], noop
}

// leastLoaded sends to the worker with the fewest requests this client
// has in flight. Ties go to the first candidate after the previous pick,
// so an idle fleet is still spread round-robin rather than piled on
// worker 0.
type leastLoaded struct {
	mu       sync.Mutex
	urls     []string
	inFlight []int
	last     int
}

func (p *leastLoaded) Acquire() (string, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.urls)
	best := -1
	for k := 1; k <= n; k++ {
		i := (p.last + k) % n
		if best < 0 || p.inFlight[i] < p.inFlight[best] {
			best = i
		}
	}
	p.last = best
	p.inFlight[best]++
	var once sync.Once
	return p.urls[best], func() {
		once.Do(func() {
			p.mu.Lock()
			p.inFlight[best]--
			p.mu.Unlock()
		})
	}
}
