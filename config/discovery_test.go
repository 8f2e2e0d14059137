package config

import (
	"strings"
	"testing"
	"time"
)

func TestDiscoveryFlags(t *testing.T) {
	cfg, err := Load([]string{
		"--discover", "dns://vllm.inference.svc.cluster.local:8000",
		"--discover", "k8s-inferencepool://inference/chat,k8s://inference?selector=app%3Dsglang",
		"--discover-interval", "2s", "--drain-grace", "1m", "--engine-poll", "all", "--engine-poll-interval", "500ms",
		"--engine-waiting-threshold", "32", "--active-decode-blocks-threshold", "0.85",
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Discover) != 3 || cfg.DiscoverInterval != 2*time.Second || cfg.Actors().DrainGrace != time.Minute {
		t.Fatalf("discovery config %+v", cfg.Discover)
	}
	sources, err := cfg.DiscoverySources()
	if err != nil || len(sources) != 3 {
		t.Fatalf("sources %v, %v", sources, err)
	}
	o := cfg.EnginePollOptions()
	if o.Interval != 500*time.Millisecond || o.Thresholds.Waiting != 32 || o.Thresholds.KVUsage != 0.85 {
		t.Fatalf("poll options %+v", o)
	}
	d := Default()
	if d.EnginePoll != EnginePollDiscovered || d.EngineWaitingThreshold != 128 || d.ActiveDecodeBlocksThreshold >= 0 ||
		d.EnginePollInterval != time.Second {
		t.Fatalf("defaults %+v", d)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--discover", "consul://x"}, "unknown scheme"},
		{[]string{"--discover", "dns://a:1", "--discover", "dns://a:1"}, "given twice"},
		{[]string{"--discover", "dns://a:1", "--discover-interval", "0s"}, "discover-interval must be > 0"},
		{[]string{"--engine-poll", "sometimes"}, "engine-poll"},
		{[]string{"--engine-poll-interval", "0s"}, "interval and timeout must be > 0"},
		{[]string{"--active-decode-blocks-threshold", "85"}, "fraction"},
		{[]string{"--engine-unhealthy-threshold", "0"}, "unhealthy threshold"},
		{[]string{"--drain-grace", "-1s"}, "drain-grace"},
	} {
		if _, err := Load(tt.args, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
	// --engine-poll off skips the poll settings.
	if _, err := Load([]string{"--engine-poll", "off", "--engine-poll-interval", "0s"}, func(string) string { return "" }); err != nil {
		t.Fatalf("engine-poll off: %v", err)
	}
}
