package metrics

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// The Router must keep satisfying what the actors push to.
var _ interface {
	DecisionPhase(string, time.Duration)
	Decision(string, uint32, int)
	DecisionDegraded(string)
	EventApplied(string)
	EventDropped(string)
	ShardRestarted(uint32, bool)
	WorkerRejected(string)
	StrideMismatch()
	QueueDepth(int)
} = (*Router)(nil)

// histogram reads a histogram's sample count and sum.
func histogram(t *testing.T, h prometheus.Observer) (uint64, float64) {
	t.Helper()
	m, ok := h.(prometheus.Metric)
	if !ok {
		t.Fatalf("%T is not a metric", h)
	}
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	if pb.Histogram == nil {
		t.Fatalf("%T is not a histogram", h)
	}
	return pb.Histogram.GetSampleCount(), pb.Histogram.GetSampleSum()
}

// gather scrapes the registry once.
func gather(t *testing.T, reg prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return fams
}

// series finds the value of one series in a scrape; ok is false when
// there is no such series.
func series(t *testing.T, fams []*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			default:
				t.Fatalf("%s is neither a counter nor a gauge", name)
			}
		}
	}
	return 0, false
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestDecisionSeries(t *testing.T) {
	m := New()
	m.Decision("routed", 4, 8)
	m.Decision("routed", 2, 0) // no prompt blocks: no hit rate
	m.Decision("no_worker", 3, 8)
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("routed")); got != 2 {
		t.Errorf("routed decisions = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("no_worker")); got != 1 {
		t.Errorf("no_worker decisions = %v, want 1", got)
	}
	// Overlap is observed for routed decisions only.
	if n, sum := histogram(t, m.overlapBlocks); n != 2 || sum != 6 {
		t.Errorf("overlap blocks: %d samples, sum %v; want 2, 6", n, sum)
	}
	if n, sum := histogram(t, m.hitRate); n != 1 || !near(sum, 0.5) {
		t.Errorf("hit rate: %d samples, sum %v; want 1, 0.5", n, sum)
	}

	m.DecisionPhase("score", 3*time.Millisecond)
	m.DecisionPhase("score", time.Millisecond)
	m.DecisionPhase("total", 5*time.Millisecond)
	if n, sum := histogram(t, m.decisionLatency.WithLabelValues("score")); n != 2 || !near(sum, 0.004) {
		t.Errorf("score phase: %d samples, sum %v s; want 2, 0.004", n, sum)
	}
	if n, _ := histogram(t, m.decisionLatency.WithLabelValues("hash")); n != 0 {
		t.Errorf("hash phase has %d samples, none recorded", n)
	}
}

func TestEventAndWorkerSeries(t *testing.T) {
	m := New()
	m.DecisionDegraded("shard_timeout")
	m.EventApplied("stored")
	m.EventApplied("stored")
	m.EventApplied("removed")
	m.EventDropped("unknown_parent")
	m.WorkerRejected("block_size_mismatch")
	m.StrideMismatch()
	m.StrideMismatch()
	m.ShardRestarted(0, true)
	m.ShardRestarted(1, false)
	m.ShardRestarted(1, false)
	m.QueueDepth(5)
	m.QueueDepth(2) // a gauge: the last value, not a sum
	fams := gather(t, m.Registry)

	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvrouter_decisions_degraded_total", map[string]string{"reason": "shard_timeout"}, 1},
		{"kvrouter_kv_events_applied_total", map[string]string{"kind": "stored"}, 2},
		{"kvrouter_kv_events_applied_total", map[string]string{"kind": "removed"}, 1},
		{"kvrouter_kv_events_dropped_total", map[string]string{"reason": "unknown_parent"}, 1},
		{"kvrouter_workers_rejected_total", map[string]string{"reason": "block_size_mismatch"}, 1},
		{"kvrouter_active_sequence_stride_mismatches_total", nil, 2},
		{"kvrouter_shard_restarts_total", map[string]string{"intact": "true"}, 1},
		{"kvrouter_shard_restarts_total", map[string]string{"intact": "false"}, 2},
		{"kvrouter_queue_depth", nil, 2},
	} {
		got, ok := series(t, fams, tt.name, tt.labels)
		if !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	if _, ok := series(t, fams, "kvrouter_kv_events_dropped_total", map[string]string{"reason": "other"}); ok {
		t.Error("a reason never counted has a series")
	}
}

func TestStateCollector(t *testing.T) {
	m := New()
	fail := false
	m.RegisterState(func(ctx context.Context) (*State, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("state gathered without a deadline")
		}
		if fail {
			return nil, errors.New("actors busy")
		}
		return &State{
			Workers: []WorkerState{{WorkerID: 7, DpRank: 1, IndexedBlocks: 42, ActiveRequests: 3, ActivePrefillTokens: 512, ActiveDecodeBlocks: 2.5}},
			WorkerGauges: []WorkerGauge{
				{Name: "engine_requests_waiting", Help: "w", WorkerID: 7, DpRank: 1, Value: 130},
				{Name: "worker_routable", Help: "r", WorkerID: 7, DpRank: 1, Value: 0},
			},
			Counters: []Counter{
				{Name: "gossip_events_sent", Source: "memberlist", Value: 10},
				{Name: "kv_events_received", Source: "jetstream", Value: 4},
				{Name: "kv_events_received", Source: "zmq", Value: 6},
				{Name: "kv_events_received", Source: "zmq", Value: 1}, // same source: summed
			},
			Gauges: map[string]float64{"ready": 1, "cluster_members": 3},
		}, nil
	})
	w := map[string]string{"worker_id": "7", "dp_rank": "1"}
	fams := gather(t, m.Registry)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvrouter_worker_indexed_blocks", w, 42},
		{"kvrouter_worker_active_requests", w, 3},
		{"kvrouter_worker_active_prefill_tokens", w, 512},
		{"kvrouter_worker_active_decode_blocks", w, 2.5},
		{"kvrouter_engine_requests_waiting", w, 130},
		{"kvrouter_worker_routable", w, 0},
		{"kvrouter_gossip_events_sent_total", map[string]string{"source": "memberlist"}, 10},
		{"kvrouter_kv_events_received_total", map[string]string{"source": "jetstream"}, 4},
		{"kvrouter_kv_events_received_total", map[string]string{"source": "zmq"}, 7},
		{"kvrouter_ready", nil, 1},
		{"kvrouter_cluster_members", nil, 3},
		{"kvrouter_scrape_errors_total", nil, 0},
	} {
		got, ok := series(t, fams, tt.name, tt.labels)
		if !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}

	// A scrape that cannot read the state counts an error and exports no
	// stale worker series.
	fail = true
	fams = gather(t, m.Registry)
	if _, ok := series(t, fams, "kvrouter_worker_indexed_blocks", w); ok {
		t.Error("worker series exported from a failed gather")
	}
	// The registry collects concurrently: the failed scrape's count shows
	// in the next one.
	fail = false
	fams = gather(t, m.Registry)
	if got, _ := series(t, fams, "kvrouter_scrape_errors_total", nil); got != 1 {
		t.Errorf("scrape errors = %v, want 1", got)
	}
	if _, ok := series(t, fams, "kvrouter_worker_indexed_blocks", w); !ok {
		t.Error("worker series missing once the state can be read again")
	}
}

// The registry is what /metrics serves: the text exposition holds the
// router's series and the Go and process collectors'.
func TestExposition(t *testing.T) {
	m := New()
	m.Decision("routed", 1, 2)
	m.QueueDepth(3)
	m.RegisterState(func(context.Context) (*State, error) {
		return &State{Gauges: map[string]float64{"nats_connected": 1}}, nil
	})
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	text := string(body)
	for _, want := range []string{
		`kvrouter_decisions_total{outcome="routed"} 1`,
		"kvrouter_queue_depth 3",
		"kvrouter_decision_overlap_blocks_count 1",
		"kvrouter_nats_connected 1",
		"# TYPE kvrouter_decision_overlap_blocks histogram",
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if problems, err := testutil.GatherAndLint(m.Registry, "kvrouter_decisions_total", "kvrouter_queue_depth"); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
