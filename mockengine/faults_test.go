package mockengine

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
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
