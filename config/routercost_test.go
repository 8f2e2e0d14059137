package config

import (
	"testing"

	"github.com/kvrouter/kvrouter/scheduling"
)

func TestRouterCostFlags(t *testing.T) {
	none := func(string) string { return "" }
	d, err := Load(nil, none)
	if err != nil {
		t.Fatal(err)
	}
	// The router's default is the ttft cost (scheduling.DefaultConfig
	// keeps Dynamo's); the replica's actors get it too.
	if sc := d.Scheduling(); sc.RouterCost != scheduling.CostTTFT || sc.TTFT != scheduling.DefaultTTFTConfig() {
		t.Fatalf("defaults: %+v", sc)
	}
	if a := d.Actors(); a.Scheduling.RouterCost != scheduling.CostTTFT {
		t.Fatalf("actors' default cost %q", a.Scheduling.RouterCost)
	}
	if scheduling.DefaultConfig().RouterCost != scheduling.CostDynamo {
		t.Fatal("scheduling.DefaultConfig is no longer Dynamo's defaults")
	}
	dy, err := Load([]string{"--router-cost", "dynamo"}, none)
	if err != nil {
		t.Fatal(err)
	}
	if sc := dy.Actors().Scheduling; sc.RouterCost != scheduling.CostDynamo {
		t.Fatalf("--router-cost dynamo gave %q", sc.RouterCost)
	}
	envDy, err := Load(nil, func(k string) string {
		if k == "KVROUTER_ROUTER_COST" {
			return "dynamo"
		}
		return ""
	})
	if err != nil || envDy.Scheduling().RouterCost != scheduling.CostDynamo {
		t.Fatalf("KVROUTER_ROUTER_COST=dynamo: %v %v", envDy, err)
	}
	env := map[string]string{"KVROUTER_ROUTER_TTFT_UNCACHED_WEIGHT": "1.5"}
	c, err := Load([]string{"--router-cost", "ttft", "--router-ttft-kv-headroom", "0.8", "--router-prefill-tokens-per-sec", "30000"},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := scheduling.TTFTConfig{UncachedWeight: 1.5, KVHeadroom: 0.8, PrefillTokensPerSec: 30000}
	if sc := c.Scheduling(); sc.RouterCost != scheduling.CostTTFT || sc.TTFT != want {
		t.Fatalf("got %+v, want ttft %+v", sc, want)
	}
	for _, args := range [][]string{
		{"--router-cost", "fastest"},
		{"--router-cost", "ttft", "--router-ttft-kv-headroom", "0"},
		{"--router-cost", "ttft", "--router-prefill-tokens-per-sec", "-1"},
	} {
		c, err := Load(args, none)
		if err == nil {
			a := c.Actors()
			err = a.Validate()
		}
		if err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
