package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/bench"
)

// runLoad sends a workload to a router that is already running — one
// replica's proxy or the load balancer in front of a cluster — and prints
// what it achieved. It starts nothing itself; `make cluster` or a
// deployment provides the fleet.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var w bench.WorkloadOptions
	fs := flag.NewFlagSet("kvbench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	registerWorkload(fs, &w)
	fs.IntVar(&w.Chat.Conversations, "chat-conversations", 16, "--workload chat (OpenAI messages to /v1/chat/completions; --model must be a served model): conversations in flight at a time")
	fs.IntVar(&w.Chat.Turns, "chat-turns", 6, "--workload chat: turns per conversation")
	fs.IntVar(&w.Chat.SystemWords, "chat-system-words", 600, "--workload chat: words of the system prompt")
	fs.IntVar(&w.Chat.UserWords, "chat-user-words", 120, "--workload chat: words of each user message")
	fs.IntVar(&w.Chat.ReplyWords, "chat-reply-words", 80, "--workload chat: words of each synthesized assistant reply in the history")
	target := fs.String("target", "", "base URL of a router replica or of the load balancer in front of several (required)")
	qps := fs.Float64("qps", 8, "offered load (requests/s); mooncake without it replays at the trace's rate times --time-scale")
	model := fs.String("model", "mock-model", "model name sent in each completion")
	timeout := fs.Duration("request-timeout", 2*time.Minute, "longest a single request may take")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	unary := fs.Bool("unary", false, "ask for whole completions instead of streams (a load balancer can retry them when a replica dies; TTFT is then the whole answer's time)")
	resumes := fs.Int("resumes", 3, "times a request goes on after its connection failed (a router replica died): sent again when nothing had arrived, a stream cut mid-answer continued from the text received (docs/operations.md, Retries); 0 = a cut request fails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("--target is required")
	}
	finishWorkload(&w)
	w.Chat.OutputTokens = w.SharedPrefix.OutputTokens
	rates := []float64{*qps}
	if w.Kind == bench.WorkloadMooncake && !flagSet(fs, "qps") {
		rates = nil // the trace's own rate times --time-scale
	}
	schedule, points, err := w.Build(rates)
	if err != nil {
		return err
	}
	reqs, err := schedule(points[0])
	if err != nil {
		return err
	}
	start := time.Now()
	if *resumes < 0 {
		return fmt.Errorf("--resumes %d: want 0 or more", *resumes)
	}
	res := bench.RunLoad(ctx, *target, reqs, points[0], bench.LoadOptions{Model: *model, Unary: *unary, Timeout: *timeout, Resumes: *resumes})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "%d requests to %s at %s QPS in %s: %d failed, %d cut (%d sent again, %d streams resumed), hit rate %.3f, TTFT p50 %.0f ms p90 %.0f ms, %.0f tok/s\n",
		res.Requests, *target, strconv.FormatFloat(points[0], 'g', 4, 64), time.Since(start).Round(time.Millisecond),
		res.Errors, res.Cut, res.Resent, res.Resumed, res.HitRate, res.TTFTP50, res.TTFTP90, res.ThroughputTokS)
	if res.Errors > 0 {
		return fmt.Errorf("%d of %d requests failed (first: %s)", res.Errors, res.Requests, res.FirstErr)
	}
	return nil
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
