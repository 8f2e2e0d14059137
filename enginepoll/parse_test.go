package enginepoll

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/scheduling"
)

// A vLLM page as vLLM (v1, data parallel 2) writes it: the load gauges
// among histograms and counters nobody here reads.
const vllmPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 12.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 7.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.93
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B"} 0.25
# HELP vllm:num_requests_waiting_by_reason not a load metric
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",reason="x"} 99.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.3
`

// Older vLLM (v0): gpu_cache_usage_perc and no engine label.
const vllmV0Page = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 40
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
`

const sglangPage = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0"} 5.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen",tp_rank="0"} 2.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen",tp_rank="0"} 0.71
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen",tp_rank="0"} 0.4
`

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name    string
		page    string
		want    Loads
		wantErr string
	}{
		{"vllm data parallel", vllmPage, Loads{
			0: {Running: 12, Waiting: 7, KVUsage: 0.93, HasKVUsage: true},
			1: {Running: 3, Waiting: 0, KVUsage: 0.25, HasKVUsage: true},
		}, ""},
		{"vllm v0 names, no rank label", vllmV0Page, Loads{AllRanks: {Running: 2, Waiting: 40, KVUsage: 0.5, HasKVUsage: true}}, ""},
		{"sglang", sglangPage, Loads{AllRanks: {Running: 5, Waiting: 2, KVUsage: 0.71, HasKVUsage: true}}, ""},
		{"sglang dp ranks", "sglang:num_queue_reqs{dp_rank=\"1\"} 3\nsglang:num_queue_reqs{dp_rank=\"0\"} 1\n",
			Loads{0: {Waiting: 1}, 1: {Waiting: 3}}, ""},
		{"several models on one rank: queues add up, the fullest KV counts",
			"vllm:num_requests_waiting{model_name=\"a\"} 1\nvllm:num_requests_waiting{model_name=\"b\"} 2\n" +
				"vllm:kv_cache_usage_perc{model_name=\"a\"} 0.2\nvllm:kv_cache_usage_perc{model_name=\"b\"} 0.6\n",
			Loads{AllRanks: {Waiting: 3, KVUsage: 0.6, HasKVUsage: true}}, ""},
		{"no final newline", "vllm:num_requests_waiting 4", Loads{AllRanks: {Waiting: 4}}, ""},
		{"malformed value", "vllm:num_requests_waiting{engine=\"0\"} lots\n", nil, "malformed /metrics"},
		{"malformed labels", "vllm:num_requests_waiting{engine=\"0} 1\n", nil, "malformed /metrics"},
		{"type clash", "# TYPE vllm:num_requests_waiting gauge\n# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting 1\n", nil, "malformed /metrics"},
		{"html", "<html><body>502 Bad Gateway</body></html>", nil, ErrNoLoadMetrics.Error()},
		{"other exporter", "# TYPE go_goroutines gauge\ngo_goroutines 12\n", nil, ErrNoLoadMetrics.Error()},
		{"empty", "", nil, ErrNoLoadMetrics.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMetrics([]byte(tt.page))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseMetrics = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	if _, err := ParseMetrics([]byte("# TYPE go_goroutines gauge\n")); !errors.Is(err, ErrNoLoadMetrics) {
		t.Fatalf("no load metric: %v", err)
	}
}

func TestRankLoads(t *testing.T) {
	busy := scheduling.BusyThresholds{KVUsage: -1, Waiting: 10}
	p := &Poller{opts: Options{Thresholds: busy}}
	tests := []struct {
		name   string
		target Target
		loads  Loads
		want   []RankLoad
	}{
		{"ranks by label", Target{DPSize: 2}, Loads{0: {Waiting: 11}, 1: {Waiting: 1}},
			[]RankLoad{{DpRank: 0, EngineLoad: scheduling.EngineLoad{Waiting: 11}, Busy: true}, {DpRank: 1, EngineLoad: scheduling.EngineLoad{Waiting: 1}}}},
		{"unlabelled: every rank", Target{DPSize: 2}, Loads{AllRanks: {Waiting: 20}},
			[]RankLoad{{DpRank: 0, EngineLoad: scheduling.EngineLoad{Waiting: 20}, Busy: true}, {DpRank: 1, EngineLoad: scheduling.EngineLoad{Waiting: 20}, Busy: true}}},
		{"engine index offset from the first rank", Target{DPStart: 4, DPSize: 2}, Loads{0: {Waiting: 20}, 1: {}},
			[]RankLoad{{DpRank: 4, EngineLoad: scheduling.EngineLoad{Waiting: 20}, Busy: true}, {DpRank: 5}}},
		{"absolute rank label", Target{DPStart: 4, DPSize: 2}, Loads{5: {Waiting: 20}},
			[]RankLoad{{DpRank: 5, EngineLoad: scheduling.EngineLoad{Waiting: 20}, Busy: true}}},
		{"labelled rank wins over unlabelled", Target{DPSize: 1}, Loads{0: {Waiting: 1}, AllRanks: {Waiting: 50}},
			[]RankLoad{{DpRank: 0, EngineLoad: scheduling.EngineLoad{Waiting: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &engine{p: p, target: tt.target}
			if got := e.rankLoads(tt.loads); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("rankLoads = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseMetrics: any page is parsed or refused, never a panic.
func FuzzParseMetrics(f *testing.F) {
	for _, p := range []string{vllmPage, vllmV0Page, sglangPage, "vllm:num_requests_waiting{engine=\"0\"} 1\n", ""} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		loads, err := ParseMetrics(page)
		if err == nil && len(loads) == 0 {
			t.Fatal("no error and no load")
		}
	})
}
