package config

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestSharedCacheKnobs(t *testing.T) {
	none := func(string) string { return "" }
	d := Default()
	if d.SharedCacheMultiplier != 0 || len(d.SharedCacheWorkers) != 0 {
		t.Fatalf("defaults: multiplier %v workers %v, want Dynamo's 0 and none", d.SharedCacheMultiplier, d.SharedCacheWorkers)
	}
	cfg, err := Load([]string{"--shared-cache-multiplier", "0.5", "--shared-cache-workers", "900,901"},
		func(k string) string {
			if k == "KVROUTER_SHARED_CACHE_WORKERS" {
				return "7" // the flag wins
			}
			return ""
		})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduling().SharedCacheMultiplier != 0.5 {
		t.Fatalf("multiplier %v not carried to scheduling", cfg.Scheduling().SharedCacheMultiplier)
	}
	stores := cfg.Actors().Index.SharedStores
	if !stores.Holds(900) || !stores.Holds(901) || stores.Holds(7) || len(stores) != 2 {
		t.Fatalf("stores %v", stores)
	}
	env, err := Load(nil, func(k string) string {
		return map[string]string{"KVROUTER_SHARED_CACHE_MULTIPLIER": "0.25", "KVROUTER_SHARED_CACHE_WORKERS": "42"}[k]
	})
	if err != nil || env.Scheduling().SharedCacheMultiplier != 0.25 || !env.Actors().Index.SharedStores.Holds(kv.WorkerID(42)) {
		t.Fatalf("environment: %+v, %v", env.Actors().Index.SharedStores, err)
	}
	for _, args := range [][]string{
		{"--shared-cache-multiplier", "-0.5"},
		{"--shared-cache-multiplier", "+Inf"},
		{"--shared-cache-workers", "store-a"},
		{"--shared-cache-workers", "1,-2"},
	} {
		if _, err := Load(args, none); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}
