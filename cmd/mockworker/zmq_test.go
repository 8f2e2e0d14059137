package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/zmqevents"
)

func TestParseZMQOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"zmq with map encoding", []string{"--kv-events", "zmq", "--zmq-encoding", "map"}, ""},
		{"unknown transport", []string{"--kv-events", "kafka"}, "want nats or zmq"},
		{"unknown encoding", []string{"--zmq-encoding", "json"}, "unknown kv event encoding"},
		{"engine forms", []string{"--kv-events", "zmq", "--zmq-encoding", "map", "--zmq-wire", "lora=sql:3,eagle,short-page=2"}, ""},
		{"unknown engine form", []string{"--kv-events", "zmq", "--zmq-wire", "bigram"}, "unknown zmq wire mode"},
		{"zmq without endpoint", []string{"--kv-events", "zmq", "--zmq-endpoint", ""}, "needs --zmq-endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, envOf(nil), io.Discard)
			if tt.wantErr == "" {
				if err != nil || o.kvEvents != "zmq" || o.zmqEncoding != zmqevents.EncodingMap {
					t.Fatalf("options %+v err %v", o, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestPublishesVLLMEventsOverZMQ(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", testutil.FreePort(t))
	rep := fmt.Sprintf("tcp://127.0.0.1:%d", testutil.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--kv-events", "zmq", "--zmq-endpoint", ep, "--zmq-replay-endpoint", rep,
			"--zmq-encoding", "map", "--worker-id", "5", "--speedup", "100", "--shutdown-grace", "50ms"},
			envOf(nil), stdoutW, io.Discard)
		stdoutW.Close()
	}()
	url, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stdoutR)
	url = strings.TrimSpace(url)

	got := make(chan kv.Event, 64)
	sub, err := zmqevents.StartSubscriber(ctx, zmqevents.WorkerEndpoint{WorkerID: 5, Endpoint: ep, ReplayEndpoint: rep},
		zmqevents.Options{BlockSize: 16, Handler: func(ev *kv.Event) {
			if ev.Kind == kv.EventStored {
				got <- *ev
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %v %v", resp, err)
	}
	resp.Body.Close()

	// The subscriber may join after the store; its first-connect replay
	// from seq 0 delivers it either way.
	local := hashing.BlockHashes(prompt, 16, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	select {
	case ev := <-got:
		if ev.Worker.WorkerID != 5 || len(ev.Blocks) != 2 || ev.Blocks[1].TokensHash != local[1] ||
			ev.Blocks[1].BlockHash != kv.ExternalBlockHash(seq[1]) {
			t.Fatalf("stored event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no stored event; stats %+v", sub.Stats())
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
}
