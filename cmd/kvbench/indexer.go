package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/bench"
)

func runIndexer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.IndexerBenchConfig{}
	var logLevel string
	fs := flag.NewFlagSet("kvbench indexer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Plan.Workers, "workers", 1000, "engines the trace's requests are spread over (round-robin)")
	fs.IntVar(&cfg.Plan.BlockSize, "block-size", 64, "router block size; must divide the trace's 512-token blocks")
	fs.IntVar(&cfg.Plan.CapacityBlocks, "capacity-blocks", 16384, "each worker's cache in router blocks; LRU blocks are removed beyond it")
	fs.StringVar(&cfg.TracePath, "trace", "", "Mooncake trace file, JSON lines, .gz for gzip (default: the embedded conversation trace)")
	fs.IntVar(&cfg.Requests, "requests", 0, "trace lines to replay (0 = all)")
	fs.IntVar(&cfg.Queriers, "queriers", 2, "goroutines issuing routing queries (update_states=false) during the replay")
	fs.IntVar(&cfg.SyncEvery, "sync-every", 64, "trace requests between waits for the shards to catch up")
	fs.IntVar(&cfg.Shards, "shards", 0, "indexer shards (0 = GOMAXPROCS)")
	fs.BoolVar(&cfg.FullRoute, "full-route", false, "time whole routing decisions instead of index lookups (Dynamo's benchmark times lookups)")
	fs.StringVar(&logLevel, "log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	log, err := newLogger(stderr, logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log
	res, err := bench.RunIndexerBench(ctx, cfg)
	if err != nil {
		return err
	}
	res.WriteText(stdout)
	return nil
}
