package bench

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewScheduleCount(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, c := range []struct {
		rate float64
		span time.Duration
		want int
	}{
		{500, 5 * time.Second, 2500}, // exact product: no extra request at the end
		{3, time.Second, 3},          // 0, 1/3, 2/3 s
		{0.5, time.Second, 1},        // only the first
		{1000, 1000500 * time.Microsecond, 1001},
		{20000, 10 * time.Second, 200000},
	} {
		s, err := NewSchedule(start, c.rate, c.span)
		if err != nil {
			t.Fatalf("rate %v span %v: %v", c.rate, c.span, err)
		}
		if s.Count != c.want {
			t.Errorf("rate %v span %v: %d requests, want %d", c.rate, c.span, s.Count, c.want)
		}
		// Every request is inside the span, and the next one would not be.
		if last := s.Offset(s.Count - 1); last >= c.span {
			t.Errorf("rate %v span %v: last request at %v, outside the span", c.rate, c.span, last)
		}
		if after := s.Offset(s.Count); after < c.span {
			t.Errorf("rate %v span %v: request %d at %v would still fit", c.rate, c.span, s.Count, after)
		}
	}
}

func TestNewScheduleRejects(t *testing.T) {
	for _, c := range []struct {
		rate float64
		span time.Duration
	}{{0, time.Second}, {-1, time.Second}, {math.NaN(), time.Second}, {math.Inf(1), time.Second}, {10, 0}, {10, -time.Second}} {
		if _, err := NewSchedule(time.Now(), c.rate, c.span); err == nil {
			t.Errorf("rate %v span %v accepted", c.rate, c.span)
		}
	}
}

func TestScheduleAtIsFixedRate(t *testing.T) {
	start := time.Unix(1000, 0)
	s, _ := NewSchedule(start, 500, time.Second)
	for _, i := range []int{0, 1, 2, 250, 499} {
		if got, want := s.At(i), start.Add(time.Duration(i)*2*time.Millisecond); !got.Equal(want) {
			t.Errorf("At(%d) = %v, want %v", i, got.Sub(start), want.Sub(start))
		}
	}
	// A rate whose interval is not a whole number of nanoseconds does not
	// drift: request 3,000,000 of 3/s is exactly 1,000,000 s in.
	s3 := Schedule{Start: start, Rate: 3, Count: 3_000_001}
	if got := s3.Offset(3_000_000); got != 1_000_000*time.Second {
		t.Errorf("Offset(3e6) at 3/s = %v, want 1e6 s", got)
	}
}

func TestScheduleDue(t *testing.T) {
	start := time.Unix(1000, 0)
	s, _ := NewSchedule(start, 500, time.Second) // every 2 ms, 500 requests
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{-time.Nanosecond, 0},
		{0, 1},
		{2*time.Millisecond - 1, 1},
		{2 * time.Millisecond, 2},
		{999 * time.Millisecond, 500},
		{time.Hour, 500}, // never more than Count
	} {
		if got := s.Due(start.Add(c.at)); got != c.want {
			t.Errorf("Due(+%v) = %d, want %d", c.at, got, c.want)
		}
	}
	// Due and At agree at every boundary, also at a rate with an uneven
	// interval.
	for _, rate := range []float64{500, 3, 7919, 33333.3} {
		s, _ := NewSchedule(start, rate, 2*time.Second)
		for i := 0; i < s.Count; i += 1 + s.Count/97 {
			if got := s.Due(s.At(i)); got != i+1 {
				t.Fatalf("rate %v: Due(At(%d)) = %d, want %d", rate, i, got, i+1)
			}
			if got := s.Due(s.At(i).Add(-1)); got != i {
				t.Fatalf("rate %v: Due(At(%d)-1ns) = %d, want %d", rate, i, got, i)
			}
		}
	}
}

func TestDurationPercentile(t *testing.T) {
	var ms []time.Duration
	for i := 1; i <= 100; i++ {
		ms = append(ms, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {99.9, 100 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.5, time.Millisecond}} {
		if got := DurationPercentile(ms, c.p); got != c.want {
			t.Errorf("p%v of 1..100 ms = %v, want %v", c.p, got, c.want)
		}
	}
	// Nearest rank: p99.9 of 1,000 samples is the 999th, not the largest.
	var k []time.Duration
	for i := 1; i <= 1000; i++ {
		k = append(k, time.Duration(i))
	}
	if got := DurationPercentile(k, 99.9); got != 999 {
		t.Errorf("p99.9 of 1..1000 = %d, want 999", got)
	}
	if got := DurationPercentile([]time.Duration{7}, 99.9); got != 7 {
		t.Errorf("p99.9 of one sample = %v, want 7", got)
	}
	if got := DurationPercentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
}

func TestSummarizeLatency(t *testing.T) {
	s := SummarizeLatency([]time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond})
	want := LatencyMs{P50: 2, P90: 10, P99: 10, P999: 10, Max: 10, Mean: 4}
	if s != want {
		t.Errorf("summary = %+v, want %+v", s, want)
	}
	if (SummarizeLatency(nil) != LatencyMs{}) {
		t.Error("summary of nothing is not zero")
	}
}

func TestOpenLoopConfigValidate(t *testing.T) {
	ok := OpenLoopConfig{Rate: 10, Duration: time.Second, MaxInFlight: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mut  func(*OpenLoopConfig)
		want string
	}{
		{func(c *OpenLoopConfig) { c.Rate = 0 }, "rate"},
		{func(c *OpenLoopConfig) { c.Rate = math.Inf(1) }, "rate"},
		{func(c *OpenLoopConfig) { c.Duration = 0 }, "duration"},
		{func(c *OpenLoopConfig) { c.Warmup = -time.Second }, "warmup"},
		{func(c *OpenLoopConfig) { c.MaxInFlight = 0 }, "max in flight"},
		{func(c *OpenLoopConfig) { c.Timeout = -1 }, "timeout"},
		{func(c *OpenLoopConfig) { c.MaxBacklog = -1 }, "backlog"},
	} {
		cfg := ok
		c.mut(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one about %s", cfg, err, c.want)
		}
		if _, err := RunOpenLoop(context.Background(), cfg, nil); err == nil {
			t.Errorf("RunOpenLoop accepted %+v", cfg)
		}
	}
}

// fakeSender answers at once, failing the requests fail says, and
// records which it saw; block, when set, is waited on before answering.
type fakeSender struct {
	mu    *sync.Mutex
	seen  map[int]int
	fail  func(seq int) string
	block func(seq int)
}

func (s *fakeSender) Send(ctx context.Context, seq int) (time.Time, string) {
	if s.block != nil {
		s.block(seq)
	}
	s.mu.Lock()
	s.seen[seq]++
	s.mu.Unlock()
	class := ""
	if s.fail != nil {
		class = s.fail(seq)
	}
	return time.Now(), class
}

func (s *fakeSender) Close() {}

func newFakes(fail func(int) string, block func(int)) (func(int) Sender, map[int]int) {
	mu := &sync.Mutex{}
	seen := map[int]int{}
	return func(int) Sender { return &fakeSender{mu: mu, seen: seen, fail: fail, block: block} }, seen
}

func TestRunOpenLoopAccounting(t *testing.T) {
	mk, seen := newFakes(func(seq int) string {
		if seq%10 == 0 {
			return "route 429"
		}
		return ""
	}, nil)
	// 2,000/s for 50 ms: 100 requests, none dropped (no timeout, default
	// backlog), every tenth answered 429.
	res, err := RunOpenLoop(context.Background(), OpenLoopConfig{Rate: 2000, Duration: 50 * time.Millisecond, MaxInFlight: 4}, mk)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 100 || res.Sent != 100 || res.OK != 90 || res.Failed() != 10 || res.Errors["route 429"] != 10 {
		t.Fatalf("scheduled %d sent %d ok %d failed %d (%v), want 100 100 90 10", res.Scheduled, res.Sent, res.OK, res.Failed(), res.Errors)
	}
	if res.AllSent != 100 {
		t.Errorf("%d sent in all, want 100", res.AllSent)
	}
	if len(res.Latency) != 90 || len(res.SendLag) != 100 {
		t.Errorf("%d latencies and %d lags, want 90 and 100", len(res.Latency), len(res.SendLag))
	}
	for i := range 100 {
		if seen[i] != 1 {
			t.Fatalf("request %d sent %d times", i, seen[i])
		}
	}
	if res.Elapsed < res.Window {
		t.Errorf("elapsed %v shorter than the window %v", res.Elapsed, res.Window)
	}
}

func TestRunOpenLoopWarmupNotRecorded(t *testing.T) {
	mk, seen := newFakes(nil, nil)
	// 1,000/s: 20 requests in the 20 ms warm-up, 30 measured.
	res, err := RunOpenLoop(context.Background(), OpenLoopConfig{Rate: 1000, Warmup: 20 * time.Millisecond, Duration: 30 * time.Millisecond, MaxInFlight: 2}, mk)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 50 {
		t.Errorf("%d requests sent, want 50 (warm-up included)", len(seen))
	}
	if res.AllSent != 50 {
		t.Errorf("%d sent in all, want 50", res.AllSent)
	}
	if res.Scheduled != 30 || res.OK != 30 || len(res.Latency) != 30 {
		t.Errorf("measured %d scheduled, %d ok, %d latencies; want 30 each", res.Scheduled, res.OK, len(res.Latency))
	}
}

// blockUntilAllDue holds every sender until the dispatcher has handled
// the last request and hold has passed, so what the dispatcher did with
// each request does not depend on the machine's speed.
func blockUntilAllDue(last int, hold time.Duration) (onDue func(int), block func(int)) {
	allDue := make(chan struct{})
	release := make(chan struct{})
	go func() {
		<-allDue
		time.Sleep(hold)
		close(release)
	}()
	return func(seq int) {
			if seq == last {
				close(allDue)
			}
		}, func(int) {
			<-release
		}
}

func TestRunOpenLoopLateRequestsCountTheirWait(t *testing.T) {
	// 10 requests due within 10 µs, 2 senders held for 20 ms after the
	// last was due: 8 requests wait for a sender, and their latency must
	// include the wait (a closed-loop client would report ~0 for them).
	const hold = 20 * time.Millisecond
	onDue, block := blockUntilAllDue(9, hold)
	mk, _ := newFakes(nil, block)
	cfg := OpenLoopConfig{Rate: 1e6, Duration: 10 * time.Microsecond, MaxInFlight: 2, onDue: onDue}
	res, err := RunOpenLoop(context.Background(), cfg, mk)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 10 || res.OK != 10 || res.Late != 8 {
		t.Fatalf("scheduled %d ok %d late %d, want 10 10 8", res.Scheduled, res.OK, res.Late)
	}
	// Every request was answered after the release, at least hold after
	// its intended time.
	if res.Latency[0] < hold {
		t.Errorf("smallest latency %v, want at least %v (measured from the intended send time)", res.Latency[0], hold)
	}
	if res.SendLag[2] < hold {
		t.Errorf("late requests' send lag %v, want at least %v", res.SendLag[2], hold)
	}
}

func TestRunOpenLoopExpiresRequestsPastTimeout(t *testing.T) {
	// The hold is far above the timeout, and the timeout far above how
	// late a sender may pick the first request up on a busy machine.
	onDue, block := blockUntilAllDue(9, 100*time.Millisecond)
	mk, seen := newFakes(nil, block)
	cfg := OpenLoopConfig{Rate: 1e6, Duration: 10 * time.Microsecond, MaxInFlight: 1, Timeout: 20 * time.Millisecond, onDue: onDue}
	res, err := RunOpenLoop(context.Background(), cfg, mk)
	if err != nil {
		t.Fatal(err)
	}
	// The first was sent; the other 9 waited 100 ms > 20 ms for the one
	// sender and were never sent.
	if res.OK != 1 || res.Sent != 1 || res.Errors[ClassExpired] != 9 || len(seen) != 1 {
		t.Fatalf("ok %d sent %d expired %d, sender saw %d; want 1 1 9 1", res.OK, res.Sent, res.Errors[ClassExpired], len(seen))
	}
}

func TestRunOpenLoopDropsBeyondBacklog(t *testing.T) {
	onDue, block := blockUntilAllDue(9, 0)
	mk, _ := newFakes(nil, block)
	cfg := OpenLoopConfig{Rate: 1e6, Duration: 10 * time.Microsecond, MaxInFlight: 1, MaxBacklog: 2, onDue: onDue}
	res, err := RunOpenLoop(context.Background(), cfg, mk)
	if err != nil {
		t.Fatal(err)
	}
	// One out, two waiting, seven dropped.
	if res.OK != 3 || res.Late != 2 || res.Errors[ClassDropped] != 7 || res.Scheduled != 10 {
		t.Fatalf("ok %d late %d dropped %d scheduled %d; want 3 2 7 10", res.OK, res.Late, res.Errors[ClassDropped], res.Scheduled)
	}
}

func TestRunOpenLoopCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mk, _ := newFakes(nil, nil)
	_, err := RunOpenLoop(ctx, OpenLoopConfig{Rate: 10, Duration: time.Hour, MaxInFlight: 1}, mk)
	if err == nil {
		t.Fatal("a cancelled run returned no error")
	}
}
