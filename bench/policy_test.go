package bench

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/config"
)

func TestParsePolicies(t *testing.T) {
	got, err := ParsePolicies(" kvrouter,round_robin, kvrouter ,oracle")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"kvrouter", "round_robin", "oracle"}) {
		t.Fatalf("got %v", got)
	}
	for _, bad := range []string{"", " , ", "kvrouter,fastest"} {
		if _, err := ParsePolicies(bad); !errors.Is(err, ErrUnknownPolicy) {
			t.Errorf("%q: got %v, want ErrUnknownPolicy", bad, err)
		}
	}
	// The ttft cost is kvrouter's now: the old name is refused with
	// the two names to use instead.
	_, err = ParsePolicies("kvrouter_ttft,round_robin")
	if !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), "use kvrouter") || !strings.Contains(err.Error(), "kvrouter_dynamo") {
		t.Errorf("kvrouter_ttft: got %v", err)
	}
}

func TestRoundRobinAndRandom(t *testing.T) {
	urls := []string{"a", "b", "c"}
	rr, _ := NewDispatcher(PolicyRoundRobin, nil, urls, 1)
	var seq []string
	for range 6 {
		u, release := rr.Acquire()
		release()
		seq = append(seq, u)
	}
	if !slices.Equal(seq, []string{"a", "b", "c", "a", "b", "c"}) {
		t.Fatalf("round robin went %v", seq)
	}
	rnd, _ := NewDispatcher(PolicyRandom, nil, urls, 1)
	counts := map[string]int{}
	for range 300 {
		u, _ := rnd.Acquire()
		counts[u]++
	}
	for _, u := range urls {
		if counts[u] < 60 {
			t.Fatalf("random picked %s only %d of 300 times", u, counts[u])
		}
	}
}

func TestLeastLoadedFollowsInFlight(t *testing.T) {
	ll, _ := NewDispatcher(PolicyLeastLoaded, nil, []string{"a", "b", "c"}, 1)
	u1, r1 := ll.Acquire()
	u2, r2 := ll.Acquire()
	u3, _ := ll.Acquire()
	if distinct := map[string]bool{u1: true, u2: true, u3: true}; len(distinct) != 3 {
		t.Fatalf("an idle fleet was not spread: %v %v %v", u1, u2, u3)
	}
	r2()
	r2() // a double release must not go negative
	if u, _ := ll.Acquire(); u != u2 {
		t.Fatalf("picked %s, want the only idle worker %s", u, u2)
	}
	r1()
	if u, _ := ll.Acquire(); u != u1 {
		t.Fatalf("picked %s, want the freed worker %s", u, u1)
	}
}

func TestDispatcherErrors(t *testing.T) {
	if _, err := NewDispatcher(PolicyKVRouter, nil, nil, 0); err == nil {
		t.Error("kvrouter without a router URL was accepted")
	}
	if _, err := NewDispatcher(PolicyRoundRobin, nil, nil, 0); err == nil {
		t.Error("round robin without workers was accepted")
	}
	if _, err := NewDispatcher(PolicyOracle, []string{"r"}, []string{"a"}, 0); err == nil {
		t.Error("oracle was dispatched")
	}
	if _, err := NewDispatcher("nope", []string{"r"}, []string{"a"}, 0); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown policy: got %v", err)
	}
	kv, _ := NewDispatcher(PolicyKVRouter, []string{"http://router"}, nil, 0)
	if u, _ := kv.Acquire(); u != "http://router" {
		t.Errorf("kvrouter sent to %s", u)
	}
}

func TestRouterPolicyConfigs(t *testing.T) {
	for _, c := range []struct {
		policy, cost string
		events       bool
	}{
		{PolicyKVRouter, "ttft", true},
		{PolicyKVRouterDynamo, "dynamo", true},
		{PolicyKVRouterApprox, "dynamo", false},
	} {
		if !IsRouterPolicy(c.policy) || RouterCost(c.policy) != c.cost || RouterUsesKVEvents(c.policy) != c.events {
			t.Errorf("%s: router %v, cost %q, events %v", c.policy, IsRouterPolicy(c.policy), RouterCost(c.policy), RouterUsesKVEvents(c.policy))
		}
	}
	if IsRouterPolicy(PolicyRoundRobin) || RouterCost(PolicyRoundRobin) != "" {
		t.Error("round_robin treated as a router policy")
	}
	// kvrouter is what `kvrouter serve` runs without flags.
	if d := config.Default().RouterCost; RouterCost(PolicyKVRouter) != d {
		t.Errorf("kvrouter runs cost %q, kvrouter serve's default is %q", RouterCost(PolicyKVRouter), d)
	}
}
