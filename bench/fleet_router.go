package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/natsbus"
	"github.com/kvrouter/kvrouter/replica"
)

// routedFleet is embedded NATS, one router replica with its proxy, and
// the mock workers publishing KV events and heartbeats to it.
type routedFleet struct {
	nats    *natsbus.Embedded
	replica *replica.Replica
	pub     *natsPublisher
	ws      *workerSet
	dir     string
}

func (f *routedFleet) RouterURL() string    { return "http://" + f.replica.HTTPAddr() }
func (f *routedFleet) WorkerURLs() []string { return f.ws.urls }

// Close stops the workers first (their last events reach a live router),
// then the router, then NATS, and removes the fleet's data directory.
func (f *routedFleet) Close(ctx context.Context) error {
	var errs []error
	if f.ws != nil {
		errs = append(errs, f.ws.stop(ctx))
	}
	if f.pub != nil {
		f.pub.conn.Close()
	}
	if f.replica != nil {
		errs = append(errs, f.replica.Shutdown(ctx))
	}
	if f.nats != nil {
		f.nats.Shutdown()
	}
	if f.dir != "" {
		errs = append(errs, os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}

// EmbeddedFleetFactory starts, per sweep point, N mock workers on
// loopback random ports and, for the kvrouter policy, embedded NATS and
// a router replica they publish to. dataDir holds each fleet's
// scratch files and is emptied as fleets close.
func EmbeddedFleetFactory(opts FleetOptions, dataDir string) (FleetFactory, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return func(ctx context.Context, withRouter bool) (Fleet, error) {
		if !withRouter {
			ws, err := startWorkers(ctx, opts, nil)
			if err != nil {
				return nil, err
			}
			return &workersOnly{ws: ws}, nil
		}
		return startRoutedFleet(ctx, opts, dataDir)
	}, nil
}

func startRoutedFleet(ctx context.Context, opts FleetOptions, dataDir string) (_ *routedFleet, err error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("fleet data dir: %w", err)
	}
	dir, err := os.MkdirTemp(dataDir, "fleet-")
	if err != nil {
		return nil, fmt.Errorf("fleet data dir: %w", err)
	}
	f := &routedFleet{dir: dir}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = f.Close(cctx)
		}
	}()
	// The router starts before any worker, so core NATS loses no event
	// and JetStream replay is not needed.
	if f.nats, err = natsbus.StartEmbedded(natsbus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "nats")}); err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	cfg := config.Default()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.NATSURL = f.nats.ClientURL()
	cfg.JetStream = false
	cfg.DataDir = dir
	cfg.BlockSize = opts.BlockSize
	cfg.ReplicaID = "bench"
	cfg.MaxNumBatchedTokens = uint64(opts.Engine.MaxNumBatchedTokens)
	if f.replica, err = replica.Start(ctx, cfg, opts.Logger.With("component", "router")); err != nil {
		return nil, fmt.Errorf("start router: %w", err)
	}
	conn, err := natsbus.Connect(ctx, cfg.NATSURL, "kvbench-workers", opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("workers' NATS connection: %w", err)
	}
	f.pub = &natsPublisher{conn: conn, eventsSubject: cfg.KVEventsSubject, workersSubject: cfg.WorkersSubject}
	if f.ws, err = startWorkers(ctx, opts, f.pub); err != nil {
		return nil, err
	}
	if err := f.waitRegistered(ctx, opts.Workers); err != nil {
		return nil, err
	}
	return f, nil
}

// waitRegistered waits until the router is ready and lists every worker
// (their first heartbeat arrived).
func (f *routedFleet) waitRegistered(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		ready := f.replica.Ready()
		if ready == nil {
			reg, err := f.replica.Router().Registry(ctx)
			if err == nil && len(reg.Workers) == n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("router did not register %d workers (ready: %v): %w", n, ready, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}
