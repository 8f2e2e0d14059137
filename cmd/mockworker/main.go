// Command mockworker runs a simulated LLM engine (package mockengine): an
// OpenAI-style /v1/completions API over a paged KV cache with prefix
// caching and continuous batching, publishing KV events and heartbeats to
// NATS like a real worker (or, with --kv-events zmq, KV events in vLLM's
// ZMQ + msgpack format with a replay socket), so a router can be exercised
// without GPUs.
//
// Every flag is also an environment variable MOCKWORKER_<UPPER_SNAKE>
// (flags win). The chosen URL is printed on stdout; logs go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/internal/version"
	"github.com/kvrouter/kvrouter/mockengine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "mockworker:", err)
		os.Exit(1)
	}
}

// run starts the worker and blocks until ctx ends and it has shut down.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		_, err := fmt.Fprintln(stdout, "mockworker", version.Get())
		return err
	}
	o, err := parseOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	o.server.Logger = log

	pub, closePub, err := connectPublisher(ctx, o, log)
	if err != nil {
		return err
	}
	defer closePub()

	srv, err := mockengine.NewServer(o.server, pub)
	if err != nil {
		return err
	}
	if zp, ok := pub.(*mockengine.ZMQPublisher); ok {
		zp.TapEngine(srv.Engine()) // the vLLM format carries token ids
	}
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.httpAddr, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	url := o.server.PublicURL
	if url == "" {
		url = "http://" + ln.Addr().String()
	}
	if _, err := fmt.Fprintln(stdout, url); err != nil {
		// The worker serves anyway; whoever waits for the URL will not get it.
		log.Error("cannot print the worker's URL", "url", url, "err", err)
	}
	return <-done
}
