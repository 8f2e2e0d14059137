package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
)

// startCutRelay starts a TCP relay in front of target (host:port) and
// returns its base URL. The first connection it relays is cut once
// cutAfter bytes of the answer went through, as a router replica killed
// mid-stream cuts its clients' connections; later ones are relayed whole.
func startCutRelay(t *testing.T, target string, cutAfter int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			limit := int64(-1)
			if n == 0 {
				limit = cutAfter
			}
			go relayConn(c, target, limit)
		}
	}()
	return "http://" + ln.Addr().String()
}

// relayConn copies c to and from a connection to target; with limit >= 0
// both connections close once limit bytes of the answer were relayed.
func relayConn(c net.Conn, target string, limit int64) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, c) // ends when either side closes
		_ = up.Close()
	}()
	if limit < 0 {
		_, _ = io.Copy(c, up)
		return
	}
	_, _ = io.CopyN(c, up, limit)
}

// collected is the stream a client's caller saw.
type collected struct {
	ids              []uint32
	text             strings.Builder
	prompt, complete int
	done             bool
}

func (c *collected) line(line []byte) error {
	data, ok := strings.CutPrefix(string(line), "data: ")
	if !ok {
		return fmt.Errorf("not a data line: %q", line)
	}
	if data == "[DONE]" {
		c.done = true
		return nil
	}
	var ch struct {
		Choices []struct {
			Text     string   `json:"text"`
			TokenIDs []uint32 `json:"token_ids"`
		} `json:"choices"`
		Usage *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(data), &ch); err != nil {
		return err
	}
	for _, x := range ch.Choices {
		c.ids = append(c.ids, x.TokenIDs...)
		c.text.WriteString(x.Text)
	}
	if ch.Usage != nil {
		c.prompt, c.complete = ch.Usage.Prompt, ch.Usage.Completion
	}
	return nil
}

// TestClientResumesCutStream: a streamed completion through a replica's
// proxy to mock engines, its connection cut mid-stream in front of the
// replica (as when the replica carrying it dies). Without resumes the
// client sees the cut; with them it continues the stream through the
// replica (resume's rule, the proxy's migration rule) and its caller
// reads exactly the uncut stream's tokens and text, once each, ended by
// [DONE], with usage counting the whole generation.
func TestClientResumesCutStream(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	slow := func(c *mockengine.ServerConfig) { c.Engine.Speedup = 2 }
	for id := uint64(1); id <= 2; id++ {
		StartMockWorker(t, rep, id, slow)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	const maxTokens = 40
	prompt := tokens(64, 31)
	body, err := json.Marshal(map[string]any{"model": "mock-model", "prompt": prompt, "max_tokens": maxTokens,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	if err != nil {
		t.Fatal(err)
	}
	want := mockengine.GeneratedTokens(prompt, maxTokens)
	var wantText strings.Builder
	for _, id := range want {
		fmt.Fprintf(&wantText, " t%d", id)
	}
	// About 200 bytes a chunk: the cut falls a few chunks in, mid-line.
	const cutAfter = 1500
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	relay := startCutRelay(t, rep.HTTPAddr(), cutAfter)
	var cut collected
	r, err := bench.StreamResumed(ctx, &http.Client{Transport: &http.Transport{}}, relay+"/v1/completions", body, false, prompt, 0, cut.line)
	if !errors.Is(err, bench.ErrCut) || r.Cuts != 0 || cut.done || len(cut.ids) == 0 || len(cut.ids) >= maxTokens {
		t.Fatalf("without resumes: err %v, %+v, %d tokens, [DONE] %v; want a stream cut after some tokens", err, r, len(cut.ids), cut.done)
	}

	relay = startCutRelay(t, rep.HTTPAddr(), cutAfter)
	var got collected
	r, err = bench.StreamResumed(ctx, &http.Client{Transport: &http.Transport{}}, relay+"/v1/completions", body, false, prompt, 3, got.line)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cuts != 1 || r.Resumed != 1 || r.Resent != 0 {
		t.Fatalf("resumption %+v, want one cut, resumed", r)
	}
	if !slices.Equal(got.ids, want) || got.text.String() != wantText.String() || !got.done {
		t.Fatalf("resumed stream: %d tokens (first difference at %d of %d), [DONE] %v\ngot  %q\nwant %q",
			len(got.ids), firstDiff(got.ids, want), len(want), got.done, got.text.String(), wantText.String())
	}
	if got.prompt != len(prompt) || got.complete != maxTokens {
		t.Fatalf("usage: %d prompt + %d completion tokens, want %d + %d", got.prompt, got.complete, len(prompt), maxTokens)
	}
	t.Logf("cut after %d of %d tokens; the resumed stream matches the uncut one", len(cut.ids), maxTokens)
}
