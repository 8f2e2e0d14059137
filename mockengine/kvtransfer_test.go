package mockengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func seqPrompt(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(7000 + i)
	}
	return p
}

// A prefill worker computes the prompt, holds its blocks and names them;
// the decode worker pulls them (releasing the hold), caches them (Stored
// events for the received blocks) and decodes without recomputing them.
func TestKVTransferBetweenRoles(t *testing.T) {
	prefillPub, decodePub := &fakePublisher{}, &fakePublisher{}
	prefill := startWorker(t, func(c *ServerConfig) { c.Role = kv.RolePrefill; c.Engine.WorkerID = 1 }, prefillPub)
	decode := startWorker(t, func(c *ServerConfig) { c.Role = kv.RoleDecode; c.Engine.WorkerID = 2 }, decodePub)
	prompt := seqPrompt(100) // 6 full blocks of 16

	code, body := postJSON(t, prefill.url+"/v1/completions", map[string]any{
		"prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil},
	})
	if code != http.StatusOK {
		t.Fatalf("prefill: %d %s", code, body)
	}
	var pre struct {
		KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pre); err != nil || pre.KVTransferParams == nil {
		t.Fatalf("prefill answer %s: %v", body, err)
	}
	xp := pre.KVTransferParams
	if !xp.DoRemotePrefill || xp.DoRemoteDecode || len(xp.RemoteBlockIDs) != 6 || *xp.RemoteEngineID != "1" ||
		*xp.RemoteHost != "127.0.0.1" || xp.RemoteRequestID == "" || xp.TPSize != 1 {
		t.Fatalf("kv_transfer_params %s", body)
	}
	if n := prefill.srv.HeldTransfers(); n != 1 {
		t.Fatalf("prefill holds %d transfers, want 1", n)
	}
	if st := prefill.srv.Engine().Stats()[0]; st.UsedBlocks != 6 {
		t.Fatalf("prefill rank references %d blocks while holding, want 6", st.UsedBlocks)
	}

	code, body = postJSON(t, decode.url+"/v1/completions", map[string]any{
		"prompt": prompt, "max_tokens": 4, "kv_transfer_params": xp,
	})
	if code != http.StatusOK {
		t.Fatalf("decode: %d %s", code, body)
	}
	var dec completionResponse
	if err := json.Unmarshal(body, &dec); err != nil || dec.Usage == nil || dec.Usage.CompletionTokens != 4 {
		t.Fatalf("decode answer %s: %v", body, err)
	}
	// The received blocks count as cached: only the partial block is computed.
	if dec.Usage.PromptTokensDetails.CachedTokens != 96 || dec.KVTransferParams != nil {
		t.Fatalf("decode cached %d tokens, want 96 (6 received blocks): %s", dec.Usage.PromptTokensDetails.CachedTokens, body)
	}
	if n := prefill.srv.HeldTransfers(); n != 0 {
		t.Fatalf("prefill still holds %d transfers after the pull", n)
	}
	if st := prefill.srv.Engine().Stats()[0]; st.UsedBlocks != 0 || st.CachedBlocks < 6 {
		t.Fatalf("prefill rank after the pull: %+v", st)
	}
	if got := decode.srv.transferredBlocks.Load(); got != 6 {
		t.Fatalf("decode transferred %d blocks, want 6", got)
	}
	testutil.Eventually(t, 5*time.Second, "decode publishes the received blocks", func() bool {
		evs, _ := decodePub.snapshot()
		stored := 0
		for _, ev := range evs {
			if ev.Kind == kv.EventStored {
				stored += len(ev.Blocks)
			}
		}
		return stored >= 6
	})
	testutil.Eventually(t, 5*time.Second, "heartbeats carry the roles", func() bool {
		_, p := prefillPub.snapshot()
		_, d := decodePub.snapshot()
		return len(p) > 0 && len(d) > 0 && p[0].Role == kv.RolePrefill && d[0].Role == kv.RoleDecode
	})

	// A second pull of the same hold finds nothing: the prompt is
	// recomputed (vLLM's recompute policy), not an error.
	code, body = postJSON(t, decode.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "kv_transfer_params": xp})
	if code != http.StatusOK || decode.srv.transferFailures.Load() != 1 {
		t.Fatalf("repeated pull: %d %s, failures %d", code, body, decode.srv.transferFailures.Load())
	}
}

func TestKVTransferRefusals(t *testing.T) {
	prefill := startWorker(t, func(c *ServerConfig) { c.Role = kv.RolePrefill }, nil)
	decode := startWorker(t, func(c *ServerConfig) { c.Role = kv.RoleDecode }, nil)
	prompt := seqPrompt(40)
	host, port := "127.0.0.1", 1
	tests := []struct {
		name, url string
		body      map[string]any
		want      string
	}{
		{"remote decode on a decode worker", decode.url, map[string]any{"prompt": prompt,
			"kv_transfer_params": map[string]any{"do_remote_decode": true}}, "sent to a decode worker"},
		{"remote prefill on a prefill worker", prefill.url, map[string]any{"prompt": prompt,
			"kv_transfer_params": KVTransferParams{DoRemotePrefill: true, RemoteHost: &host, RemotePort: &port, RemoteRequestID: "x"}},
			"sent to a prefill worker"},
		{"streamed prefill", prefill.url, map[string]any{"prompt": prompt, "stream": true,
			"kv_transfer_params": map[string]any{"do_remote_decode": true}}, "must not stream"},
		{"both directions", prefill.url, map[string]any{"prompt": prompt,
			"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": true}}, "exclusive"},
		{"remote prefill without an address", decode.url, map[string]any{"prompt": prompt,
			"kv_transfer_params": map[string]any{"do_remote_prefill": true}}, "needs remote_host"},
		{"malformed params", decode.url, map[string]any{"prompt": prompt, "kv_transfer_params": "yes"}, "kv_transfer_params"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := postJSON(t, tt.url+"/v1/completions", tt.body)
			if code != http.StatusBadRequest || !strings.Contains(string(body), tt.want) {
				t.Fatalf("%d %s, want 400 with %q", code, body, tt.want)
			}
		})
	}
	if code, _ := postJSON(t, prefill.url+"/kv_transfer/pulled", map[string]string{"remote_request_id": "nope"}); code != http.StatusNotFound {
		t.Fatalf("unknown hold: %d", code)
	}
}

// Holds are bounded in number and in time: nothing pins the cache forever.
func TestKVHoldsBounded(t *testing.T) {
	released := map[string]int{}
	rel := func(id string) func() { return func() { released[id]++ } }
	h := newKVHolds(2, time.Minute)
	t0 := time.Unix(1000, 0)
	h.add("a", rel("a"), 3, t0)
	h.add("b", rel("b"), 3, t0.Add(time.Second))
	h.add("c", rel("c"), 3, t0.Add(2*time.Second)) // full: a (closest to expiry) goes
	if released["a"] != 1 || h.dropped != 1 || h.len(t0.Add(2*time.Second)) != 2 {
		t.Fatalf("bound: released %v dropped %d", released, h.dropped)
	}
	if n, ok := h.take("b"); !ok || n != 3 || released["b"] != 1 {
		t.Fatalf("take b: %d %v %v", n, ok, released)
	}
	if _, ok := h.take("b"); ok {
		t.Fatal("b taken twice")
	}
	if n := h.len(t0.Add(3 * time.Minute)); n != 0 || released["c"] != 1 || h.expired != 1 {
		t.Fatalf("expiry: %d held, released %v", n, released)
	}
}

func TestTransferTime(t *testing.T) {
	c := DefaultConfig() // 128 KiB per token, 16-token blocks, 400 Gb/s
	// 100 blocks = 1600 tokens × 131072 B × 8 = 1.6777e9 bits / 4e11 b/s.
	if got, want := c.TransferTime(100), time.Duration(1600*131072*8/400e9*float64(time.Second)); got != want {
		t.Fatalf("transfer time %v, want %v", got, want)
	}
	c.KVTransferGbps = 0
	if c.TransferTime(100) != 0 {
		t.Fatal("no bandwidth model: free transfers")
	}
	p, err := Preset(PresetH100Llama3_8B)
	if err != nil || p.KVBytesPerToken != 131072 {
		t.Fatalf("preset KV bytes per token %v, %v", p.KVBytesPerToken, err)
	}
}

// Whatever a request carries, kv_transfer_params decode to a checked
// value or a bad-request error.
func FuzzKVTransferOf(f *testing.F) {
	f.Add([]byte(`{"kv_transfer_params":{"do_remote_decode":true,"remote_engine_id":null}}`))
	f.Add([]byte(`{"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"h","remote_port":1,"remote_request_id":"x","remote_block_ids":[1]}}`))
	f.Add([]byte(`{"kv_transfer_params":{"do_remote_prefill":true}}`))
	f.Add([]byte(`{"kv_transfer_params":7}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := kvTransferOf(body)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error %v is not a bad request", err)
			}
			return
		}
		if p != nil && p.DoRemotePrefill && (p.RemoteHost == nil || p.RemotePort == nil || p.RemoteRequestID == "" || p.DoRemoteDecode) {
			t.Fatalf("unchecked params %+v", p)
		}
	})
}

// Chat completions take part in transfers the same way.
func TestKVTransferChat(t *testing.T) {
	tok := qwen3(t)
	prefill := startWorker(t, func(c *ServerConfig) { c.Role = kv.RolePrefill; c.Tokenizer = tok }, nil)
	decode := startWorker(t, func(c *ServerConfig) { c.Role = kv.RoleDecode; c.Tokenizer = tok }, nil)
	msgs := []map[string]string{{"role": "user", "content": strings.Repeat("Tell me about paged attention and prefix caching. ", 12)}}
	code, body := postJSON(t, prefill.url+"/v1/chat/completions", map[string]any{"messages": msgs, "max_completion_tokens": 1,
		"stream": false, "kv_transfer_params": map[string]any{"do_remote_decode": true}})
	var pre struct {
		KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pre); code != http.StatusOK || err != nil || pre.KVTransferParams == nil || len(pre.KVTransferParams.RemoteBlockIDs) == 0 {
		t.Fatalf("chat prefill: %d %s", code, body)
	}
	code, body = postJSON(t, decode.url+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 3,
		"kv_transfer_params": pre.KVTransferParams})
	var dec chatResponse
	if err := json.Unmarshal(body, &dec); code != http.StatusOK || err != nil || dec.Usage == nil ||
		dec.Usage.PromptTokensDetails.CachedTokens != 16*len(pre.KVTransferParams.RemoteBlockIDs) {
		t.Fatalf("chat decode: %d %s", code, body)
	}
	if prefill.srv.HeldTransfers() != 0 || decode.srv.transferredBlocks.Load() != uint64(len(pre.KVTransferParams.RemoteBlockIDs)) {
		t.Fatalf("holds %d, transferred %d", prefill.srv.HeldTransfers(), decode.srv.transferredBlocks.Load())
	}
}
