// Command kvrouter runs one KV-cache-aware router replica.
//
//	kvrouter serve [flags]   start a replica (see -h for every flag)
//	kvrouter version         print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/replica"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kvrouter serve [flags] | kvrouter version")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "version":
		fmt.Println(replica.Version)
		return nil
	}
	return fmt.Errorf("unknown command %q (want serve or version)", args[0])
}

func serve(args []string) error {
	cfg, err := config.Load(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		return err
	}
	if cfg.GCPercent > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := replica.Start(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("start replica: %w", err)
	}
	log.Info("kvrouter serving", "http", rep.HTTPAddr(), "nats", rep.NATSURL(), "replica", rep.ID())
	<-ctx.Done()
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return rep.Shutdown(shutdownCtx)
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
