package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/hashing"
)

func TestPublishesRouterEventsAndHeartbeatsOverNATS(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)

	sub, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	events := make(chan *nats.Msg, 64)
	heartbeats := make(chan *nats.Msg, 64)
	if _, err := sub.ChanSubscribe("kvrouter.kv_events", events); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.ChanSubscribe("kvrouter.workers", heartbeats); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", ns.ClientURL(), "--worker-id", "77", "--speedup", "100",
			"--heartbeat-interval", "50ms", "--shutdown-grace", "50ms", "--dp-size", "2"}, envOf(nil), stdoutW, io.Discard)
		stdoutW.Close()
	}()
	url, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stdoutR)
	url = strings.TrimSpace(url)

	var hb map[string]any
	receive(t, heartbeats, &hb)
	want := map[string]any{"worker_id": 77.0, "url": url, "data_parallel_start_rank": 0.0, "data_parallel_size": 2.0,
		"block_size": 16.0, "total_kv_blocks": 16384.0, "model_name": "mock-model", "max_num_batched_tokens": 8192.0}
	for k, v := range want {
		if hb[k] != v {
			t.Fatalf("heartbeat %s = %v, want %v (%v)", k, hb[k], v, hb)
		}
	}

	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1, "dp_rank": 1})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %v %v", resp, err)
	}
	resp.Body.Close()

	var ev struct {
		WorkerID    uint64 `json:"worker_id"`
		StorageTier string `json:"storage_tier"`
		Event       struct {
			EventID uint64          `json:"event_id"`
			DpRank  uint32          `json:"dp_rank"`
			Data    json.RawMessage `json:"data"`
		} `json:"event"`
	}
	receive(t, events, &ev)
	var data struct {
		Stored struct {
			ParentHash *uint64 `json:"parent_hash"`
			Blocks     []struct {
				BlockHash  uint64 `json:"block_hash"`
				TokensHash uint64 `json:"tokens_hash"`
			} `json:"blocks"`
		} `json:"stored"`
	}
	if err := json.Unmarshal(ev.Event.Data, &data); err != nil {
		t.Fatal(err)
	}
	local := hashing.BlockHashes(prompt, 16, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	if ev.WorkerID != 77 || ev.StorageTier != "device" || ev.Event.EventID != 0 || ev.Event.DpRank != 1 ||
		data.Stored.ParentHash != nil || len(data.Stored.Blocks) != 2 ||
		data.Stored.Blocks[1].BlockHash != uint64(seq[1]) || data.Stored.Blocks[1].TokensHash != uint64(local[1]) {
		t.Fatalf("stored event %+v data %s", ev, ev.Event.Data)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not stop")
	}
	// Shutdown announces both ranks' caches as cleared.
	cleared := 0
	for cleared < 2 {
		receive(t, events, &ev)
		if string(ev.Event.Data) == `"cleared"` {
			cleared++
		}
	}
}

func receive(t *testing.T, ch <-chan *nats.Msg, v any) {
	t.Helper()
	select {
	case m := <-ch:
		if err := json.Unmarshal(m.Data, v); err != nil {
			t.Fatalf("decode %s: %v", m.Data, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing published")
	}
}
