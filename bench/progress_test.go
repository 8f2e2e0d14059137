package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSweepProgressTimeLeft(t *testing.T) {
	spans := []time.Duration{40 * time.Second, 10 * time.Second, 5 * time.Second}
	cases := []struct {
		name    string
		done    int
		extra   time.Duration
		elapsed time.Duration
		want    time.Duration
	}{
		{"before the first point: default overhead on every point", 0, 0, 0, 55*time.Second + 3*defaultPointOverhead},
		{"into the first point", 0, 0, 30 * time.Second, 25*time.Second + 3*defaultPointOverhead},
		{"first point overran its span: the rest uses the mean overhead", 1, 8 * time.Second, 0, 15*time.Second + 2*8*time.Second},
		{"running point past its expected end counts nothing for it", 2, 10 * time.Second, time.Minute, 0},
		{"all points done", 3, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newSweepProgress(io.Discard, spans)
			p.done, p.extra = c.done, c.extra
			if got := p.timeLeft(c.elapsed); got != c.want {
				t.Fatalf("time left %v, want %v", got, c.want)
			}
		})
	}
}

// TestSweepPrintsProgress: each measured point announces itself with its
// place in the sweep; the oracle (computed) is not counted; no line
// carries a terminal control code.
func TestSweepPrintsProgress(t *testing.T) {
	var served, closed atomic.Int64
	factory := func(ctx context.Context, policy string) (Fleet, error) {
		return &fakeFleet{workers: []*httptest.Server{sseWorker(t, &served)}, closed: &closed}, nil
	}
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 2, PromptsPerGroup: 2, SystemTokens: 64, QuestionTokens: 16, OutputTokens: 3}, 4, 1)
	schedule := func(qps float64) ([]Request, error) { return PoissonSchedule(prompts, qps, 1) }
	var out bytes.Buffer
	cfg := SweepConfig{Workload: WorkloadSharedPrefix, QPS: []float64{100, 200}, Policies: []string{PolicyKVRouter, PolicyRoundRobin, PolicyOracle},
		BlockSize: 16, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Progress: &out}
	if _, err := Sweep(context.Background(), cfg, schedule, factory); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"[1/4] kvrouter at 100 requests/s: starting the fleet (4 requests",
		"[2/4] round_robin at 100 requests/s: starting the fleet",
		"[4/4] round_robin at 200 requests/s: starting the fleet",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("progress lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "oracle") || strings.ContainsAny(text, "\r\x1b") {
		t.Errorf("progress counts the oracle or uses control codes:\n%q", text)
	}
}

func TestProgressLineCountsSentAndDone(t *testing.T) {
	var out bytes.Buffer
	p := newSweepProgress(&out, []time.Duration{10 * time.Second, 10 * time.Second})
	d := newCountingDispatcher(staticDispatcher("http://w"))
	var releases []func()
	for range 3 {
		_, release := d.Acquire()
		releases = append(releases, release)
	}
	releases[0]()
	p.startPoint(PolicyRoundRobin, 64, 10)
	p.report(PolicyRoundRobin, 64, int(d.sent.Load()), int(d.done.Load()), 10)
	if !strings.Contains(out.String(), "[1/2] round_robin at 64 requests/s: 3/10 requests sent, 1 done, ") ||
		!strings.Contains(out.String(), "left in the sweep\n") {
		t.Fatalf("progress line:\n%s", out.String())
	}
}

type staticDispatcher string

func (s staticDispatcher) Acquire() (string, func()) { return string(s), func() {} }
