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
	if sc := d.Scheduling(); sc.RouterCost != scheduling.CostDynamo || sc.TTFT != scheduling.DefaultTTFTConfig() {
		t.Fatalf("defaults: %+v", sc)
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
