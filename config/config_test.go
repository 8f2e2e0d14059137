package config

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/parity"
)

func TestLoadPrecedence(t *testing.T) {
	env := map[string]string{
		"KVROUTER_BLOCK_SIZE":         "32",
		"KVROUTER_ROUTER_TEMPERATURE": "0.5",
		"KVROUTER_NATS_URL":           "nats://example:4222",
		"KVROUTER_USE_KV_EVENTS":      "false",
	}
	cfg, err := Load([]string{"--block-size", "64", "--http-addr", "127.0.0.1:9999", "--static-workers", "1=http://a,2=http://b@0:2"},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BlockSize != 64 {
		t.Errorf("flag must win over env: block size %d", cfg.BlockSize)
	}
	if cfg.RouterTemperature != 0.5 || cfg.NATSURL != "nats://example:4222" || cfg.UseKVEvents {
		t.Errorf("env not applied: %+v", cfg)
	}
	if cfg.HTTPAddr != "127.0.0.1:9999" || len(cfg.StaticWorkers) != 2 {
		t.Errorf("flags not applied: %+v", cfg)
	}
	if d := Default(); d.RouterTTLSecs != 120 || d.RouterMaxTreeSize != 1<<20 || d.RouterPruneTargetRatio != 0.8 || d.BlockSize != 16 {
		t.Errorf("Dynamo defaults changed: %+v", d)
	}
}

func TestLoadErrors(t *testing.T) {
	none := func(string) string { return "" }
	for _, args := range [][]string{
		{"--block-size", "x"},
		{"--block-size", "0"},
		{"--decision-timeout", "soon"},
		{"--static-workers", "nope"},
		{"--router-prune-target-ratio", "1.5"},
		{"stray"},
	} {
		if _, err := Load(args, none); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
	if _, err := Load(nil, func(k string) string {
		if k == "KVROUTER_BLOCK_SIZE" {
			return "sixteen"
		}
		return ""
	}); err == nil {
		t.Error("a malformed environment value must be an error")
	}
}

func TestBoolFlagForms(t *testing.T) {
	none := func(string) string { return "" }
	cfg, err := Load([]string{"--use-kv-events=false", "--router-track-output-blocks"}, none)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.UseKVEvents || !cfg.RouterTrackOutputBlocks {
		t.Errorf("bool flags: %+v", cfg)
	}
	if cfg.Actors().Index.TTL != 120*time.Second {
		t.Errorf("ttl mapping: %v", cfg.Actors().Index.TTL)
	}
}

func TestParseStaticWorkers(t *testing.T) {
	ws, err := ParseStaticWorkers([]string{"7=http://h:1@2:4"})
	if err != nil || len(ws) != 1 || ws[0].ID != 7 || ws[0].URL != "http://h:1" || ws[0].DpStart != 2 || ws[0].DpSize != 4 {
		t.Fatalf("got %+v, %v", ws, err)
	}
	ws, err = ParseStaticWorkers([]string{"8=http://p:1;role=prefill", "9=http://d:1@0:2;role=decode"})
	if err != nil || ws[0].Role != kv.RolePrefill || ws[0].URL != "http://p:1" || ws[1].Role != kv.RoleDecode || ws[1].DpSize != 2 {
		t.Fatalf("roles: got %+v, %v", ws, err)
	}
	for _, bad := range []string{"x=http://h", "7=http://h@2", "7=http://h@a:b", "7=http://h@0:0",
		"7=http://h;role=producer", "7=http://h;dp=2"} {
		if _, err := ParseStaticWorkers([]string{bad}); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

func TestParseZMQEndpoints(t *testing.T) {
	eps, err := ParseZMQEndpoints([]string{"3=tcp://10.0.0.5:5557;replay=tcp://10.0.0.5:5558;dp=2", "4=tcp://*:6000;bind"})
	if err != nil || len(eps) != 2 {
		t.Fatalf("%+v %v", eps, err)
	}
	if eps[0] != (ZMQEndpoint{WorkerID: 3, Endpoint: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", DPSize: 2}) {
		t.Errorf("first: %+v", eps[0])
	}
	if !eps[1].Bind || eps[1].DPSize != 1 {
		t.Errorf("second: %+v", eps[1])
	}
	for _, bad := range []string{"tcp://h:1", "x=tcp://h:1", "3=", "3=tcp://h:1;dp=0", "3=tcp://h:1;colour=red",
		"3=tcp://h:1;start=-1", "3=tcp://h:1;start=x", "3=tcp://h:1;start=2000000"} {
		if _, err := ParseZMQEndpoints([]string{bad}); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// start=R numbers the ranks of an engine that hosts ranks R..R+N-1 of a
// larger data-parallel group; the syntax without it still parses.
func TestParseZMQEndpointsStartRank(t *testing.T) {
	eps, err := ParseZMQEndpoints([]string{"5=tcp://10.0.0.6:5557;dp=2;start=2;replay=tcp://10.0.0.6:5558", "6=tcp://10.0.0.7:5557"})
	if err != nil {
		t.Fatal(err)
	}
	want := []ZMQEndpoint{
		{WorkerID: 5, Endpoint: "tcp://10.0.0.6:5557", Replay: "tcp://10.0.0.6:5558", DPSize: 2, DPStartRank: 2},
		{WorkerID: 6, Endpoint: "tcp://10.0.0.7:5557", DPSize: 1},
	}
	if len(eps) != 2 || eps[0] != want[0] || eps[1] != want[1] {
		t.Fatalf("got %+v want %+v", eps, want)
	}
}

func TestScaleOutKnobs(t *testing.T) {
	env := map[string]string{
		"KVROUTER_ROUTER_ACTIVE_SEQUENCE_STRIDE": "8",
		"KVROUTER_CLUSTER_BATCH_INTERVAL":        "5ms",
	}
	cfg, err := Load(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RouterActiveSequenceStride != 8 || cfg.ClusterBatchInterval != 5*time.Millisecond || cfg.ClusterBatchMaxEvents != 256 {
		t.Fatalf("stride %d, batch %v / %d events", cfg.RouterActiveSequenceStride, cfg.ClusterBatchInterval, cfg.ClusterBatchMaxEvents)
	}
	if ac := cfg.Actors(); ac.Sequence.Stride != 8 {
		t.Fatalf("stride not passed to the sequence trackers: %+v", ac.Sequence)
	}
	// The scale-out defaults (docs/benchmarks.md, "Many replicas"):
	// stride 8 where Dynamo defaults to 1, 5 ms batches where Dynamo
	// waits 1 ms.
	if d := Default(); d.RouterActiveSequenceStride != 8 || d.ClusterBatchInterval != 5*time.Millisecond {
		t.Fatalf("scale-out defaults changed: stride %d, batch %v", d.RouterActiveSequenceStride, d.ClusterBatchInterval)
	}
	for _, args := range [][]string{
		{"--router-active-sequence-stride", "-2"},
		{"--cluster-batch-interval", "0s"},
		{"--cluster-batch-max-events", "0"},
		{"--cluster-batch-max-events", fmt.Sprint(cluster.MaxBatchEvents + 1)},
		{"--cluster-batch-interval", "1µs"}, // below cluster.MinBatchInterval
		{"--procs-per-cpu", "0.5"},
		{"--procs-per-cpu", "9"},
		{"--procs-per-cpu", "NaN"},
	} {
		if _, err := Load(args, func(string) string { return "" }); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// The cluster batch knobs have one source of truth: their defaults are the
// cluster package's, and every value the flags accept cluster.Start
// accepts (and the other way round).
func TestClusterBatchKnobsFollowTheClusterPackage(t *testing.T) {
	d, cd := Default(), cluster.DefaultConfig()
	if d.ClusterBatchMaxEvents != cd.BatchMaxEvents || d.ClusterBatchInterval != cd.BatchInterval {
		t.Fatalf("defaults %d / %v, cluster's %d / %v", d.ClusterBatchMaxEvents, d.ClusterBatchInterval, cd.BatchMaxEvents, cd.BatchInterval)
	}
	for _, n := range []int{-1, 0, 1, cluster.DefaultBatchMaxEvents, cluster.MaxBatchEvents, cluster.MaxBatchEvents + 1} {
		for _, iv := range []time.Duration{-time.Millisecond, 0, 1000, cluster.MinBatchInterval - 1, cluster.MinBatchInterval, time.Millisecond, 5 * time.Millisecond} {
			c := Default()
			c.ClusterBatchMaxEvents, c.ClusterBatchInterval = n, iv
			cc := cluster.DefaultConfig()
			cc.BindAddr = "127.0.0.1" // DefaultConfig's 0.0.0.0 also needs a key
			cc.BatchMaxEvents, cc.BatchInterval = n, iv
			cfgErr, clErr := c.Validate(), cc.Validate()
			if (cfgErr == nil) != (clErr == nil) {
				t.Errorf("max events %d, interval %v: config says %v, cluster says %v", n, iv, cfgErr, clErr)
			}
			if cfgErr != nil && !strings.Contains(cfgErr.Error(), "cluster-batch-") {
				t.Errorf("max events %d, interval %v: error %q does not name the flag", n, iv, cfgErr)
			}
		}
	}
}

// -h lists every flag with its default; no flag's String panics (the flag
// package calls it on zero values of our types).
func TestUsageListsFlagsWithoutPanics(t *testing.T) {
	cfg := Default()
	fs := flag.NewFlagSet("kvrouter serve", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	if err := Register(fs, &cfg, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"-h"}); err != flag.ErrHelp {
		t.Fatalf("parse -h: %v", err)
	}
	usage := out.String()
	if strings.Contains(usage, "panic") {
		t.Fatalf("usage reports panics:\n%s", usage)
	}
	for _, want := range []string{"-use-kv-events", "-block-size", "(default 16)", "-cluster-batch-interval", "(default 5ms)"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

// Gossip on a non-loopback address needs a cluster key, or an explicit
// --cluster-insecure; the refusal names both flags.
func TestClusterSecurityFlags(t *testing.T) {
	none := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		env  map[string]string
		ok   bool
	}{
		{[]string{"--cluster-bind", "0.0.0.0:7946"}, nil, false},
		{[]string{"--cluster-bind", "10.1.2.3:7946", "--cluster-join", "kvrouter-gossip:7946"}, nil, false},
		{[]string{"--cluster-bind", "0.0.0.0:7946", "--cluster-insecure"}, nil, true},
		{[]string{"--cluster-bind", "0.0.0.0:7946", "--cluster-key-file", "/run/secrets/kvrouter/cluster.key"}, nil, true},
		{[]string{"--cluster-bind", "0.0.0.0:7946"}, map[string]string{"KVROUTER_CLUSTER_KEY_FILE": "/k"}, true},
		{[]string{"--cluster-bind", "127.0.0.1:7946"}, nil, true},
		{[]string{"--cluster-bind", "[::1]:7946"}, nil, true},
		{nil, nil, true}, // no cluster
		{[]string{"--cluster-bind", "127.0.0.1:7946", "--cluster-tls-cert", "c.pem"}, nil, false},
		{[]string{"--cluster-bind", "127.0.0.1:7946", "--cluster-tls-cert", "c.pem", "--cluster-tls-key", "k.pem", "--cluster-tls-ca", "ca.pem"}, nil, true},
	} {
		getenv := none
		if tc.env != nil {
			getenv = func(k string) string { return tc.env[k] }
		}
		cfg, err := Load(tc.args, getenv)
		if (err == nil) != tc.ok {
			t.Errorf("%v %v: err = %v, want ok=%v", tc.args, tc.env, err, tc.ok)
			continue
		}
		if err != nil && strings.Contains(strings.Join(tc.args, " "), "0.0.0.0") {
			for _, want := range []string{"--cluster-key-file", "--cluster-insecure", "KVROUTER_CLUSTER_KEY_FILE", "openssl rand -base64 32"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%v: error %q does not mention %s", tc.args, err, want)
				}
			}
		}
		if err == nil && tc.env != nil && cfg.ClusterKeyFile != "/k" {
			t.Errorf("KVROUTER_CLUSTER_KEY_FILE not applied: %q", cfg.ClusterKeyFile)
		}
	}
}

func TestServedModelFlags(t *testing.T) {
	cfg, err := Load([]string{"--served-model", "a=/x", "--served-model", "b=/y,c=/z", "--served-lora", "l=a"},
		func(k string) string {
			if k == "KVROUTER_SERVED_MODEL" {
				return "env=/e"
			}
			return ""
		})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.ServedModels, " "); got != "a=/x b=/y c=/z" {
		t.Errorf("repeated --served-model: %q (the first flag replaces the environment's value, the next ones add)", got)
	}
	if _, err := Load([]string{"--served-model", "a"}, func(string) string { return "" }); err == nil {
		t.Error("--served-model NAME without --tokenizer loaded")
	}
	if _, err := Load([]string{"--tokenizer-mode", "magic"}, func(string) string { return "" }); err == nil {
		t.Error("--tokenizer-mode magic loaded")
	}
	if _, err := Load([]string{"--served-lora", "x"}, func(string) string { return "" }); err == nil {
		t.Error("--served-lora without =MODEL loaded")
	}
}

// The parity flags load into the tracker's config and are checked only
// when parity is on.
func TestParityFlags(t *testing.T) {
	env := func(string) string { return "" }
	cfg, err := Load([]string{"--parity-window", "30", "--parity-min-samples", "5", "--parity-mismatch-threshold", "0.1",
		"--parity-clean-window", "0", "--parity-auto-switch=false"}, env)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.ParityConfig()
	if p.Window != 30 || p.MinSamples != 5 || p.MismatchThreshold != 0.1 || p.CleanWindow != 0 || p.AutoSwitch {
		t.Fatalf("parity config %+v", p)
	}
	def := Default()
	if d := def.ParityConfig(); d != parity.DefaultConfig() {
		t.Fatalf("defaults %+v, want the parity package's %+v", d, parity.DefaultConfig())
	}
	for _, bad := range [][]string{
		{"--parity-window", "0"},
		{"--parity-mismatch-threshold", "1.5"},
		{"--parity-min-samples", "100", "--parity-window", "10"},
		{"--parity-clean-window", "-1"},
	} {
		if _, err := Load(bad, env); err == nil {
			t.Errorf("%v loaded", bad)
		}
		if _, err := Load(append(bad, "--parity=false"), env); err != nil {
			t.Errorf("%v with --parity=false: %v", bad, err)
		}
	}
}
