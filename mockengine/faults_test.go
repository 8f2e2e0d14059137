package mockengine

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func TestMetricsSGLangNames(t *testing.T) {
	w := startWorker(t, func(c *ServerConfig) { c.MetricsFlavor = MetricsSGLang; c.Engine.DPSize = 2 }, nil)
	_, page := get(t, w.url+"/metrics")
	for _, want := range []string{
		`sglang:num_running_reqs{dp_rank="1",model_name="mock-model"} 0`,
		`sglang:num_queue_reqs{dp_rank="0",model_name="mock-model"} 0`,
		`sglang:token_usage{dp_rank="0",model_name="mock-model"} 0`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(page, "vllm:num_requests") {
		t.Error("SGLang flavour exports vLLM load names")
	}
	cfg := DefaultServerConfig()
	cfg.MetricsFlavor = "trtllm"
	if _, err := NewServer(cfg, nil); err == nil {
		t.Fatal("unknown metrics flavour accepted")
	}
}

// Injected faults: /health fails, the waiting queue grows; POST /fault
// does the same for a worker in another process.
func TestFaults(t *testing.T) {
	w := startWorker(t, nil, nil)
	w.srv.SetHealthy(false)
	w.srv.SetExtraWaiting(500)
	if code, _ := get(t, w.url+"/health"); code != http.StatusServiceUnavailable {
		t.Fatalf("unhealthy /health answered %d", code)
	}
	if _, page := get(t, w.url+"/metrics"); !strings.Contains(page, `vllm:num_requests_waiting{engine="0",model_name="mock-model"} 500`) {
		t.Fatalf("extra waiting not reported:\n%s", page)
	}
	resp, err := http.Post(w.url+"/fault", "application/json", bytes.NewReader([]byte(`{"healthy":true,"extra_waiting":0}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, _ := get(t, w.url+"/health"); resp.StatusCode != 200 || code != http.StatusOK {
		t.Fatalf("after POST /fault: %d, /health %d", resp.StatusCode, code)
	}
	resp, err = http.Post(w.url+"/fault", "application/json", bytes.NewReader([]byte(`{"healthy":"maybe"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad fault body answered %d", resp.StatusCode)
	}
}

// A muted worker keeps serving and caching but publishes no KV event;
// the ids of the events it lost are spent, so when publishing resumes the
// next event shows the gap.
func TestEventsMuted(t *testing.T) {
	pub := &fakePublisher{}
	w := startWorker(t, nil, pub)
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(1000 + i)
	}
	complete(t, w.url, prompt, 1, "", nil)
	waitEvents := func(n int) []kv.Event {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			evs, _ := pub.snapshot()
			if len(evs) >= n || time.Now().After(deadline) {
				return evs
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := len(waitEvents(1))
	if before == 0 {
		t.Fatal("no event before muting")
	}
	resp, err := http.Post(w.url+"/fault", "application/json", bytes.NewReader([]byte(`{"events_muted":true}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	other := slices.Clone(prompt)
	other[0] = 7
	if got := complete(t, w.url, other, 1, "", nil); got.Usage == nil || got.Usage.PromptTokens != 64 {
		t.Fatalf("muted worker did not serve: %+v", got)
	}
	time.Sleep(100 * time.Millisecond)
	if evs, _ := pub.snapshot(); len(evs) != before {
		t.Fatalf("muted worker published %d events", len(evs)-before)
	}
	if _, page := get(t, w.url+"/metrics"); !strings.Contains(page, `kv_event_muted`) {
		t.Fatal("muted events not counted")
	}
	if got := complete(t, w.url, other, 1, "", nil); got.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatal("a muted worker stopped caching")
	}
	w.srv.SetEventsMuted(false)
	third := slices.Clone(prompt)
	third[0] = 8
	complete(t, w.url, third, 1, "", nil)
	evs := waitEvents(before + 1)
	if len(evs) <= before {
		t.Fatal("no event after unmuting")
	}
	if last, next := evs[before-1].EventID, evs[before].EventID; next <= last+1 {
		t.Fatalf("event ids %d then %d: the muted events' ids were reused", last, next)
	}
}
