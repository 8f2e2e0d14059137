package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/natsbus"
	"github.com/kvrouter/kvrouter/replica"
)

// routedFleet is embedded NATS, the router replicas (one, or a memberlist
// cluster of several) with their proxies, and the mock workers publishing
// KV events and heartbeats to them.
type routedFleet struct {
	nats     *natsbus.Embedded
	replicas []*replica.Replica
	conn     *nats.Conn // the workers' publishing connection
	ws       *workerSet
	dns      *dnsWorkers // with --discovery dns
	dir      string
}

func (f *routedFleet) RouterURLs() []string {
	urls := make([]string, len(f.replicas))
	for i, r := range f.replicas {
		urls[i] = "http://" + r.HTTPAddr()
	}
	return urls
}
func (f *routedFleet) WorkerURLs() []string { return f.ws.urls }

// Close stops the workers first (their last events reach a live router),
// then the router, then NATS, and removes the fleet's data directory.
func (f *routedFleet) Close(ctx context.Context) error {
	var errs []error
	if f.ws != nil {
		errs = append(errs, f.ws.stop(ctx))
	}
	if f.conn != nil {
		f.conn.Close()
	}
	if f.dns != nil {
		f.dns.close()
	}
	for _, r := range f.replicas {
		errs = append(errs, r.Shutdown(ctx))
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
	return func(ctx context.Context, policy string) (Fleet, error) {
		if !IsRouterPolicy(policy) {
			ws, err := startWorkers(ctx, opts, nil)
			if err != nil {
				return nil, err
			}
			return &workersOnly{ws: ws}, nil
		}
		return startRoutedFleet(ctx, opts, policy, dataDir)
	}, nil
}

func startRoutedFleet(ctx context.Context, opts FleetOptions, policy, dataDir string) (_ *routedFleet, err error) {
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
	cfg.MaxNumBatchedTokens = uint64(opts.Engine.MaxNumBatchedTokens)
	cfg.RouterCost = RouterCost(policy)
	cfg.UseKVEvents = RouterUsesKVEvents(policy)
	cfg.MaxLocalPrefillLength = opts.MaxLocalPrefillLength
	if opts.Stride > 0 {
		cfg.RouterActiveSequenceStride = opts.Stride
	}
	if opts.BatchInterval > 0 {
		cfg.ClusterBatchInterval = opts.BatchInterval
	}
	if opts.Discovery == DiscoveryDNS {
		// The engines first: the router's first lookup finds them all.
		var uri string
		if f.ws, f.dns, uri, err = startDNSWorkers(ctx, opts); err != nil {
			return nil, err
		}
		cfg.Discover = []string{uri}
		cfg.DiscoverInterval = time.Second
	}
	for i := range max(opts.Replicas, 1) {
		rc := cfg
		rc.ReplicaID = fmt.Sprintf("bench-%d", i)
		if opts.Replicas > 1 {
			// The production failure detector, not --cluster-fast: a
			// benchmark loads the machine, and the fast profile's 100 ms
			// probes declared live replicas dead under that load (docs/operations.md,
			// "Failure detection").
			rc.ClusterBind = "127.0.0.1:0"
			for _, peer := range f.replicas {
				rc.ClusterJoin = append(rc.ClusterJoin, peer.ClusterAddr())
			}
		}
		r, err := replica.Start(ctx, rc, opts.Logger.With("component", "router", "replica", rc.ReplicaID))
		if err != nil {
			return nil, fmt.Errorf("start router replica %d: %w", i, err)
		}
		f.replicas = append(f.replicas, r)
	}
	if f.ws == nil {
		conn, err := natsbus.Connect(ctx, cfg.NATSURL, "kvbench-workers", opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("workers' NATS connection: %w", err)
		}
		f.conn = conn
		var pub mockengine.Publisher = mockengine.NewNATSPublisher(conn, cfg.KVEventsSubject, cfg.WorkersSubject)
		if !cfg.UseKVEvents {
			// Approximate mode is for engines that publish no KV events;
			// sent anyway, each would be a counted, logged drop.
			pub = heartbeatsOnly{pub}
		}
		if f.ws, err = startWorkers(ctx, opts, pub); err != nil {
			return nil, err
		}
	}
	if err := f.waitRegistered(ctx, opts.Workers); err != nil {
		return nil, err
	}
	return f, nil
}

// waitRegistered waits until the router is ready and lists every worker
// (their first heartbeat arrived, or discovery found them).
func (f *routedFleet) waitRegistered(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		ready := f.allRegistered(ctx, n)
		if ready == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("router did not register %d workers (ready: %v): %w", n, ready, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// allRegistered is nil once every replica is ready, lists n workers and
// (with several) sees all its peers.
func (f *routedFleet) allRegistered(ctx context.Context, n int) error {
	for _, r := range f.replicas {
		if err := r.Ready(); err != nil {
			return err
		}
		reg, err := r.Router().Registry(ctx)
		if err != nil {
			return err
		}
		if len(reg.Workers) != n {
			return fmt.Errorf("replica %s lists %d of %d workers", r.ID(), len(reg.Workers), n)
		}
		if len(f.replicas) > 1 && len(r.Members()) != len(f.replicas) {
			return fmt.Errorf("replica %s sees %d of %d peers", r.ID(), len(r.Members()), len(f.replicas))
		}
	}
	return nil
}

// heartbeatsOnly publishes a worker's heartbeats and none of its KV
// events, as an engine without KV events does.
type heartbeatsOnly struct{ mockengine.Publisher }

func (heartbeatsOnly) PublishEvent(context.Context, *kv.Event) error { return nil }
