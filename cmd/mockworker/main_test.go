package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/version"
	"github.com/kvrouter/kvrouter/mockengine"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o options)
		wantErr string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, o options) {
				want := mockengine.DefaultConfig()
				e := o.server.Engine
				if o.httpAddr != "127.0.0.1:0" || o.natsURL != "" || o.kvEventsSubject != "kvrouter.kv_events" ||
					o.workersSubject != "kvrouter.workers" || o.server.HeartbeatInterval != time.Second {
					t.Fatalf("front-end defaults: %+v", o)
				}
				if e.BlockSize != want.BlockSize || e.TotalKVBlocks != want.TotalKVBlocks || e.MaxNumSeqs != 256 || e.MaxNumBatchedTokens != 8192 {
					t.Fatalf("engine defaults: %+v", e)
				}
				if e.WorkerID == 0 || uint64(e.WorkerID) >= 1<<63 {
					t.Fatalf("random worker id %d", e.WorkerID)
				}
			},
		},
		{
			name: "environment, then flags win",
			args: []string{"--block-size", "32", "--worker-id", "9"},
			env: map[string]string{
				"MOCKWORKER_BLOCK_SIZE": "64", "MOCKWORKER_DP_SIZE": "4", "MOCKWORKER_SPEEDUP": "2.5",
				"MOCKWORKER_STEP_BASE_TIME": "3ms", "MOCKWORKER_NATS_URL": "nats://x:4222",
			},
			check: func(t *testing.T, o options) {
				e := o.server.Engine
				if e.BlockSize != 32 || e.DPSize != 4 || e.Speedup != 2.5 || e.StepBaseTime != 3*time.Millisecond ||
					e.WorkerID != 9 || o.natsURL != "nats://x:4222" {
					t.Fatalf("got %+v nats %q", e, o.natsURL)
				}
			},
		},
		{
			name: "a preset sets the engine defaults, explicit flags win",
			args: []string{"--preset", "h100-llama3-8b", "--max-num-seqs", "64"},
			check: func(t *testing.T, o options) {
				want, _ := mockengine.Preset(mockengine.PresetH100Llama3_8B)
				e := o.server.Engine
				if e.TotalKVBlocks != want.TotalKVBlocks || e.PrefillTokensPerSec != want.PrefillTokensPerSec ||
					e.DecodeKVTokensPerSec != want.DecodeKVTokensPerSec || e.ModelName != "Llama-3-8B" || e.MaxNumSeqs != 64 {
					t.Fatalf("got %+v", e)
				}
			},
		},
		{
			name: "a preset from the environment",
			env:  map[string]string{"MOCKWORKER_PRESET": "h100-llama3-8b"},
			check: func(t *testing.T, o options) {
				if want, _ := mockengine.Preset(mockengine.PresetH100Llama3_8B); o.server.Engine.TotalKVBlocks != want.TotalKVBlocks {
					t.Fatalf("got %+v", o.server.Engine)
				}
			},
		},
		{name: "unknown preset", args: []string{"--preset", "tpu"}, wantErr: "unknown mock engine preset"},
		{name: "malformed environment", env: map[string]string{"MOCKWORKER_DP_SIZE": "two"}, wantErr: "MOCKWORKER_DP_SIZE"},
		{name: "invalid engine value", args: []string{"--total-kv-blocks", "0"}, wantErr: "total kv blocks"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "log level"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--gpus", "8"}, wantErr: "not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, envOf(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--speedup", "100", "--shutdown-grace", "50ms"}, envOf(nil), stdoutW, io.Discard)
		stdoutW.Close()
	}()
	url, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url = strings.TrimSpace(url)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("printed %q", url)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":[1,2,3],"max_tokens":2}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	go io.Copy(io.Discard, stdoutR)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

// -h and --help print the flags and end with flag.ErrHelp, which main
// treats as success (exit 0).
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var stderr bytes.Buffer
		err := run(context.Background(), []string{arg}, func(string) string { return "" }, io.Discard, &stderr)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v, want flag.ErrHelp", arg, err)
		}
		if !strings.Contains(stderr.String(), "-block-size") {
			t.Errorf("%s printed no flags: %q", arg, stderr.String())
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, func(string) string { return "" }, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "mockworker " + version.Get().String() + "\n"; stdout.String() != want {
		t.Fatalf("--version printed %q, want %q", stdout.String(), want)
	}
}
