package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
)

// pdFixture is testdata/vllm_pd_nixl.json: vLLM's P/D requests and the
// prefill answer (see its "source").
type pdFixture struct {
	Client, Prefill, PrefillResponse, Decode json.RawMessage
}

func loadPDFixture(t *testing.T) pdFixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/vllm_pd_nixl.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Client          json.RawMessage `json:"client_request"`
		Prefill         json.RawMessage `json:"prefill_request"`
		PrefillResponse json.RawMessage `json:"prefill_response"`
		Decode          json.RawMessage `json:"decode_request"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return pdFixture{f.Client, f.Prefill, f.PrefillResponse, f.Decode}
}

// vllmStub is a vLLM server at the edge of the test: it records what it
// receives and answers with a canned body (or a status).
type vllmStub struct {
	srv     *httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
}

func startVLLMStub(t *testing.T, answer func(w http.ResponseWriter)) *vllmStub {
	v := &vllmStub{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		v.bodies, v.headers = append(v.bodies, raw), append(v.headers, r.Header.Clone())
		v.mu.Unlock()
		answer(w)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vllmStub) seen() ([][]byte, []http.Header) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.bodies, v.headers
}

func streamDecode(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; i < 3; i++ {
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\" t%d\"}]}\n\n", i)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

type pdWorker struct {
	id   uint64
	url  string
	role kv.Role
}

// startPDRig is a router (max_local_prefill_length 16) with the proxy in
// front of the given workers.
func startPDRig(t *testing.T, ws ...pdWorker) (string, *actors.Router) {
	t.Helper()
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	cfg.Scheduling.MaxLocalPrefillLength = 16
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for _, w := range ws {
		if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: w.id, Url: w.url, DataParallelSize: 1,
			Role: messages.WorkerRole(w.role)}, true); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Options{Router: r, Metrics: metrics.New(), MigrationLimit: 3, BlockSize: cfg.BlockSize, MaxBodyBytes: 1 << 20, Proxy: true,
		Log: slog.New(slog.DiscardHandler), Client: &http.Client{Timeout: 10 * time.Second}})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, r
}

// sameJSON compares two JSON documents as values.
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: not JSON: %q", what, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %s\n want %s", what, got, want)
	}
}

// transferParams is a body's kv_transfer_params, compacted.
func transferParams(t *testing.T, body []byte) string {
	t.Helper()
	var f struct {
		P json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, f.P); err != nil {
		t.Fatalf("kv_transfer_params %q: %v", f.P, err)
	}
	return b.String()
}

// settled waits until the router holds no request and every rank is idle.
func settled(t *testing.T, r *actors.Router) {
	t.Helper()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		st, err := r.Status(context.Background(), false)
		if err != nil {
			return err
		}
		if st.TrackedRequests != 0 {
			return fmt.Errorf("%d requests tracked", st.TrackedRequests)
		}
		for _, w := range st.Workers {
			for _, rk := range w.Ranks {
				if rk.ActiveRequests != 0 || rk.ActivePrefillTokens != 0 || rk.ActiveDecodeBlocks != 0 {
					return fmt.Errorf("worker %d: %+v", w.WorkerID, rk)
				}
			}
		}
		return nil
	})
}

// The two hops of a disaggregated request carry exactly what vLLM's own
// P/D proxy sends: the prefill request as in the fixture, and the
// prefill answer's kv_transfer_params, byte for byte, in the decode
// request, whose stream reaches the client.
func TestDisaggregatedProxyFixtureRoundTrip(t *testing.T) {
	fx := loadPDFixture(t)
	prefill := startVLLMStub(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(fx.PrefillResponse)
	})
	release := make(chan struct{})
	decode := startVLLMStub(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\" t0\"}]}\n\n")
		w.(http.Flusher).Flush()
		<-release // the decode is under way
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\" t1\"}]}\n\ndata: [DONE]\n\n")
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the stub closes, should the test fail mid-decode
	url, r := startPDRig(t, pdWorker{1, prefill.srv.URL, kv.RolePrefill}, pdWorker{2, decode.srv.URL, kv.RoleDecode})

	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(fx.Client))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, first, 10); err != nil {
		t.Fatal(err)
	}
	// While the decode streams, the prefill hop is freed (its answer
	// arrived) and the decode is the one request left.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		st, err := r.Status(context.Background(), false)
		if err != nil {
			return err
		}
		active := map[uint64]uint32{}
		for _, w := range st.Workers {
			active[w.WorkerID] = w.Ranks[0].ActiveRequests
		}
		if st.TrackedRequests != 1 || active[1] != 0 || active[2] != 1 {
			return fmt.Errorf("mid-decode: tracked %d, active %v; want 1 tracked, the decode on worker 2", st.TrackedRequests, active)
		}
		return nil
	})
	unblock()
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := append(first, rest...)
	if resp.StatusCode != 200 || !strings.Contains(string(got), " t1") || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
		t.Fatalf("client got %d %q", resp.StatusCode, got)
	}
	pb, ph := prefill.seen()
	db, dh := decode.seen()
	if len(pb) != 1 || len(db) != 1 {
		t.Fatalf("prefill saw %d requests, decode %d; want 1 each", len(pb), len(db))
	}
	sameJSON(t, "prefill request", pb[0], fx.Prefill)
	sameJSON(t, "decode request", db[0], fx.Decode)
	// The parameters travel verbatim (key order included) from the
	// prefill answer into the decode request.
	if g, w := transferParams(t, db[0]), transferParams(t, fx.PrefillResponse); g != w {
		t.Fatalf("decode kv_transfer_params\n got  %s\n want %s", g, w)
	}
	if g, w := transferParams(t, pb[0]), transferParams(t, fx.Prefill); g != w {
		t.Fatalf("prefill kv_transfer_params\n got  %s\n want %s", g, w)
	}
	id := ph[0].Get("X-Request-Id")
	if id == "" || dh[0].Get("X-Request-Id") != id || resp.Header.Get("X-Request-Id") != id ||
		ph[0].Get("X-data-parallel-rank") != "0" || dh[0].Get("X-data-parallel-rank") != "0" {
		t.Fatalf("headers: prefill %v decode %v", ph[0], dh[0])
	}
	settled(t, r)
}

// storePrompt tells the router a worker caches the prompt (a KV event).
func storePrompt(r *actors.Router, worker uint64, tokens []uint32, blockSize int) {
	local := hashing.BlockHashes(tokens, blockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	ev := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(worker)}, Kind: kv.EventStored}
	for i := range local {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	r.ApplyEvent(ev)
}

func fixturePrompt(t *testing.T, fx pdFixture) []uint32 {
	var c struct {
		Prompt []uint32 `json:"prompt"`
	}
	if err := json.Unmarshal(fx.Client, &c); err != nil {
		t.Fatal(err)
	}
	return c.Prompt
}

// A prefill worker that fails is replaced once by another prefill worker
// (the route is made again without it); the request completes and
// nothing stays tracked.
func TestDisaggregatedPrefillRetry(t *testing.T) {
	fx := loadPDFixture(t)
	broken := startVLLMStub(t, func(w http.ResponseWriter) { http.Error(w, `{"error":"engine dead"}`, http.StatusInternalServerError) })
	good := startVLLMStub(t, func(w http.ResponseWriter) { w.Write(fx.PrefillResponse) })
	decode := startVLLMStub(t, streamDecode)
	url, r := startPDRig(t, pdWorker{1, broken.srv.URL, kv.RolePrefill}, pdWorker{2, good.srv.URL, kv.RolePrefill},
		pdWorker{3, decode.srv.URL, kv.RoleDecode})
	// The broken worker caches the prompt, so the KV-aware prefill choice
	// takes it first.
	storePrompt(r, 1, fixturePrompt(t, fx), actors.DefaultConfig().BlockSize)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		reply, err := r.Route(context.Background(), &messages.RouteRequest{TokenIds: fixturePrompt(t, fx)})
		if err != nil || reply.PrefillWorker.GetWorkerId() != 1 {
			return fmt.Errorf("prefill on %v (%v), want 1 once its event is in", reply.GetPrefillWorker(), err)
		}
		return nil
	})
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(fx.Client))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("after a prefill retry: %d %q", resp.StatusCode, body)
	}
	if b, _ := broken.seen(); len(b) != 1 {
		t.Fatalf("broken prefill worker saw %d requests, want 1", len(b))
	}
	if b, _ := good.seen(); len(b) != 1 {
		t.Fatalf("second prefill worker saw %d requests, want 1", len(b))
	}
	if db, _ := decode.seen(); len(db) != 1 || transferParams(t, db[0]) != transferParams(t, fx.PrefillResponse) {
		t.Fatalf("decode requests %q", db)
	}
	settled(t, r)
}

// A decode worker that fails after the prefill, with no other decode
// worker to take the request, is a 502 with a JSON error naming it; both
// hops are freed.
func TestDisaggregatedDecodeFailure(t *testing.T) {
	fx := loadPDFixture(t)
	prefill := startVLLMStub(t, func(w http.ResponseWriter) { w.Write(fx.PrefillResponse) })
	decode := startVLLMStub(t, func(w http.ResponseWriter) { http.Error(w, "out of KV blocks", http.StatusServiceUnavailable) })
	url, r := startPDRig(t, pdWorker{1, prefill.srv.URL, kv.RolePrefill}, pdWorker{2, decode.srv.URL, kv.RoleDecode})
	var e struct{ Error string }
	code := postJSONTo(t, url+"/v1/completions", fx.Client, &e)
	if code != http.StatusBadGateway || !strings.Contains(e.Error, "decode worker 2") || !strings.Contains(e.Error, "503") {
		t.Fatalf("decode failure: %d %q", code, e.Error)
	}
	// A decode worker nobody can reach: the same.
	decode.srv.Close()
	code = postJSONTo(t, url+"/v1/completions", fx.Client, &e)
	if code != http.StatusBadGateway || !strings.Contains(e.Error, "decode worker 2") {
		t.Fatalf("unreachable decode: %d %q", code, e.Error)
	}
	if pb, _ := prefill.seen(); len(pb) != 2 {
		t.Fatalf("prefill saw %d requests, want 2 (no other decode worker to retry on)", len(pb))
	}
	settled(t, r)
}

// A decode worker that fails after the prefill is replaced by another
// decode worker (the request is routed again without it, prefill
// included); the client gets the whole stream and nothing stays tracked.
func TestDisaggregatedDecodeRetry(t *testing.T) {
	fx := loadPDFixture(t)
	prefill := startVLLMStub(t, func(w http.ResponseWriter) { w.Write(fx.PrefillResponse) })
	broken := startVLLMStub(t, func(w http.ResponseWriter) { http.Error(w, "engine dead", http.StatusServiceUnavailable) })
	good := startVLLMStub(t, streamDecode)
	url, r := startPDRig(t, pdWorker{1, prefill.srv.URL, kv.RolePrefill}, pdWorker{2, broken.srv.URL, kv.RoleDecode},
		pdWorker{3, good.srv.URL, kv.RoleDecode})
	// Until the broken decode worker has been tried once, a request may
	// go to the good one first; send until it was.
	for i := 0; i < 20; i++ {
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(fx.Client))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if b, _ := broken.seen(); len(b) > 0 {
			break
		}
	}
	b, _ := broken.seen()
	if len(b) == 0 {
		t.Fatal("the broken decode worker was never chosen")
	}
	if g, _ := good.seen(); len(g) == 0 {
		t.Fatal("the good decode worker served nothing")
	}
	settled(t, r)
}

// A short prompt stays on the decode worker: one hop, unchanged body.
func TestDisaggregatedShortPromptIsLocal(t *testing.T) {
	prefill := startVLLMStub(t, func(w http.ResponseWriter) { http.Error(w, "unexpected", http.StatusTeapot) })
	decode := startVLLMStub(t, streamDecode)
	url, r := startPDRig(t, pdWorker{1, prefill.srv.URL, kv.RolePrefill}, pdWorker{2, decode.srv.URL, kv.RoleDecode})
	body := `{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":3,"stream":true}`
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	db, _ := decode.seen()
	if pb, _ := prefill.seen(); resp.StatusCode != 200 || len(pb) != 0 || len(db) != 1 || string(db[0]) != body {
		t.Fatalf("status %d, prefill saw %d, decode saw %q", resp.StatusCode, len(pb), db)
	}
	settled(t, r)
}

// Clients cannot steer engines' KV connectors: kv_transfer_params in a
// proxied request is refused, aggregated or not.
func TestClientTransferParamsRefused(t *testing.T) {
	decode := startVLLMStub(t, streamDecode)
	url, r := startPDRig(t, pdWorker{2, decode.srv.URL, kv.RoleBoth})
	var e struct{ Error string }
	body := []byte(`{"prompt":[1,2,3],"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.1","remote_port":5600}}`)
	// (Chat takes the same path, proxied.serve, once its messages are
	// tokenized.)
	if code := postJSONTo(t, url+"/v1/completions", body, &e); code != http.StatusBadRequest || !strings.Contains(e.Error, "kv_transfer_params") {
		t.Fatalf("%d %q", code, e.Error)
	}
	if db, _ := decode.seen(); len(db) != 0 {
		t.Fatalf("the engine saw %d requests", len(db))
	}
	settled(t, r)
}

func postJSONTo(t *testing.T, url string, body []byte, out any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("answer is not JSON: %q", raw)
	}
	return resp.StatusCode
}

// The prefill answer's parameters are an object kept verbatim, or none;
// anything else is an error, never a panic.
func FuzzTransferParamsOf(f *testing.F) {
	f.Add([]byte(`{"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1,2]}}`))
	f.Add([]byte(`{"kv_transfer_params":null}`))
	f.Add([]byte(`{"kv_transfer_params":[1]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`nope`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		p, err := transferParamsOf(answer)
		if err != nil {
			return
		}
		if p != nil && (p[0] != '{' || !json.Valid(p)) {
			t.Fatalf("params %q from %q", p, answer)
		}
	})
}
