// Package replica wires one router replica together: NATS (embedded or
// external), the actors, KV-event and heartbeat ingestion, cluster
// gossip, the HTTP API and metrics, and their orderly shutdown. cmd/kvrouter
// is a thin main over it; tests and the bench harness start replicas
// in-process through it.
package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/eppapi"
	"github.com/kvrouter/kvrouter/grpcapi"
	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/internal/version"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/netpolicy"
)

// Version is this build's short version (internal/version: an -ldflags
// override, else the module version and VCS revision), reported to peers
// in cluster metadata.
func Version() string { return version.Get().Short() }

// Replica is one running router replica.
type Replica struct {
	cfg config.Config
	// base carries the replica id and is handed to the components
	// (actors, cluster, natsbus, httpapi, zmqevents), which add their own
	// "component" attribute; log is base with component=replica, for the
	// replica's own messages.
	base    *slog.Logger
	log     *slog.Logger
	id      string
	router  *actors.Router
	metrics *metrics.Router
	bus     *bus
	cluster *clusterLink
	http    *http.Server
	ln      net.Listener

	// discovery finds engines that never heartbeat and polls engines'
	// health and load (discovery.go).
	discovery *discoveryLink

	// The admin listener (--admin-addr), tokens and worker-address
	// policy (http.go).
	adminHTTP *http.Server
	adminLn   net.Listener
	// The gRPC API (--grpc-addr; grpc.go).
	grpc   *grpcapi.Server
	grpcLn net.Listener
	// The gateway endpoint picker (--epp-addr; epp.go).
	epp         *eppapi.Server
	eppLn       net.Listener
	api         *httpapi.Server
	adminTokens *httpapi.Tokens
	apiTokens   *httpapi.Tokens
	policy      *netpolicy.Policy
	resolve     netpolicy.Resolver
	rejects     *rejectLog

	// publish is swapped in once the cluster node exists; the router
	// starts before it so the node can deliver into it immediately.
	publish atomic.Pointer[func(*messages.SequenceEvent)]
	// gossipNode is the cluster node once it exists: the API layers wait
	// on it (Sent) before they acknowledge a free or a prefill completion.
	gossipNode atomic.Pointer[cluster.Node]

	// warm: the KV-event replay caught up and the shards applied it.
	warm      atomic.Bool
	wasReady  atomic.Bool   // warm-up done once: from then on only NATS gates readiness
	snapshots atomic.Uint64 // index snapshots stored

	shutdownOnce sync.Once
	shutdownErr  error
	stopWarm     chan struct{}
}

// Start brings a replica up. On error everything already started is
// stopped again.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *Replica, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Replica{cfg: cfg, id: cfg.ReplicaID}
	if r.id == "" {
		r.id = defaultReplicaID()
	}
	r.base = log.With("replica", r.id)
	r.log = r.base.With("component", "replica")
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if serr := r.Shutdown(sctx); serr != nil {
				r.log.Warn("stopping a replica that failed to start", "err", serr)
			}
		}
	}()

	r.metrics = metrics.New()
	if err = r.metrics.SetReplica(r.id); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ac := cfg.Actors()
	ac.ReplicaID = r.id
	ac.Logger = r.base
	ac.Observer = r.metrics
	ac.Publish = func(ev *messages.SequenceEvent) {
		if p := r.publish.Load(); p != nil {
			(*p)(ev)
		}
	}
	ac.Gossiped = func(ctx context.Context) error {
		if n := r.gossipNode.Load(); n != nil {
			return n.Sent(ctx)
		}
		return nil
	}
	if r.router, err = actors.Start(ac); err != nil {
		return nil, fmt.Errorf("start actors: %w", err)
	}
	if err = r.listen(); err != nil {
		return nil, err
	}
	if err = r.registerStatic(); err != nil {
		return nil, err
	}
	if r.bus, err = startBus(ctx, cfg, r.id, r.router, r.metrics, r.base, r.admitHeartbeat); err != nil {
		return nil, fmt.Errorf("start NATS ingestion: %w", err)
	}
	r.addSelfListeners()
	if err = r.startDiscovery(); err != nil {
		return nil, fmt.Errorf("start discovery: %w", err)
	}
	r.stopWarm = make(chan struct{})
	go r.warmUp()
	if r.bus.snapshots != nil && cfg.RouterSnapshotThreshold > 0 {
		go r.snapshotLoop()
	}
	r.metrics.RegisterState(r.gatherState)
	if err = r.serveHTTP(); err != nil {
		return nil, err
	}
	r.serveGRPC()
	if err = r.serveEPP(); err != nil {
		return nil, err
	}
	if err = r.joinCluster(ctx); err != nil {
		return nil, err
	}
	r.addSelfListeners()
	return r, nil
}

func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kvrouter"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (it crashes the program instead)
	// A boot nonce: memberlist refuses a known name at a new address.
	return host + "-" + hex.EncodeToString(b[:])
}

func (r *Replica) registerStatic() error {
	workers, err := config.ParseStaticWorkers(r.cfg.StaticWorkers)
	if err != nil {
		return err
	}
	for _, w := range workers {
		if err := r.checkStaticWorker(w.URL); err != nil {
			return fmt.Errorf("static worker %d: %w", w.ID, err)
		}
		err := r.router.RegisterWorker(&messages.WorkerHeartbeat{
			WorkerId: w.ID, Url: w.URL, DataParallelStartRank: w.DpStart, DataParallelSize: w.DpSize,
			BlockSize: uint32(r.cfg.BlockSize), Role: messages.WorkerRole(w.Role),
		}, true)
		if err != nil {
			return fmt.Errorf("static worker %d: %w", w.ID, err)
		}
	}
	return nil
}

// ID is the replica's cluster id.
func (r *Replica) ID() string { return r.id }

// HTTPAddr is the address the API listens on (resolved if port 0).
func (r *Replica) HTTPAddr() string {
	if r.ln == nil {
		return ""
	}
	return r.ln.Addr().String()
}

// NATSURL is the NATS server this replica uses.
func (r *Replica) NATSURL() string {
	if r.bus == nil {
		return ""
	}
	return r.bus.url
}

// Router exposes the actors' façade (for tests and the bench harness).
func (r *Replica) Router() *actors.Router { return r.router }

// ClusterAddr is the memberlist address ("" without a cluster).
func (r *Replica) ClusterAddr() string {
	if r.cluster == nil {
		return ""
	}
	return r.cluster.Addr()
}

// Ready says why the replica should not get traffic yet (nil = ready):
// NATS disconnected, or the KV-event replay not yet caught up and applied.
func (r *Replica) Ready() error {
	if r.bus == nil {
		return errors.New("NATS ingestion not started")
	}
	if err := r.bus.Ready(); err != nil {
		return err
	}
	if err := r.clusterMembership(); err != nil {
		return err
	}
	if r.wasReady.Load() {
		// Warm-up conditions gate the first readiness only: a peer's
		// digest lagging under load later must not flip every replica
		// out of the load balancer at once.
		return nil
	}
	if !r.warm.Load() {
		return errors.New("KV event replay is being applied to the index")
	}
	if r.cluster != nil {
		if err := r.cluster.node.PeersSynced(); err != nil {
			return err
		}
	}
	r.wasReady.Store(true)
	return nil
}

// warmUp marks the replica warm once the replay has been received and a
// barrier shows every shard applied it: routing before that would ignore
// the fleet's cached prefixes.
func (r *Replica) warmUp() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-r.stopWarm:
			return
		case <-t.C:
		}
		if r.bus.events == nil || !r.bus.events.Ready() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := r.router.Barrier(ctx)
		cancel()
		if err != nil {
			r.log.Warn("index barrier after replay failed; retrying", "err", err)
			continue
		}
		r.warm.Store(true)
		r.log.Info("KV event replay applied to the index: warm", "took", time.Since(start))
		return
	}
}

// Shutdown stops taking requests, leaves the cluster, stops ingestion
// and the actors, and closes NATS — in that order, so no request is
// routed on a half-stopped replica.
func (r *Replica) Shutdown(ctx context.Context) error {
	r.shutdownOnce.Do(func() {
		r.closeWarm()
		var errs []error
		if r.http != nil {
			if err := r.http.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("drain HTTP: %w", err))
			}
		}
		if r.adminHTTP != nil {
			if err := r.adminHTTP.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("drain admin HTTP: %w", err))
			}
		}
		if r.grpc != nil {
			if err := r.grpc.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if r.epp != nil {
			if err := r.epp.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		r.closeListeners()
		if r.cluster != nil {
			r.publish.Store(nil)
			if err := r.cluster.Leave(ctx); err != nil {
				errs = append(errs, fmt.Errorf("leave cluster: %w", err))
			}
		}
		if r.discovery != nil {
			r.discovery.Close()
		}
		if r.bus != nil {
			r.bus.Close()
		}
		if r.router != nil {
			r.router.Stop()
		}
		r.shutdownErr = errors.Join(errs...)
	})
	return r.shutdownErr
}

// Kill stops the replica abruptly, as a crash would: no HTTP drain and no
// cluster leave, so peers only learn of it from memberlist's failure
// detection. Tests use it to exercise failover.
func (r *Replica) Kill() {
	r.shutdownOnce.Do(func() {
		r.closeWarm()
		if r.http != nil {
			// Like a crash: connections are cut, and an error closing
			// them has no one to be reported to.
			_ = r.http.Close()
		}
		if r.adminHTTP != nil {
			_ = r.adminHTTP.Close()
		}
		if r.grpc != nil {
			cut, cancel := context.WithCancel(context.Background())
			cancel()
			_ = r.grpc.Stop(cut) // a cancelled context: connections are cut at once, as by a crash
		}
		if r.epp != nil {
			cut, cancel := context.WithCancel(context.Background())
			cancel()
			_ = r.epp.Stop(cut)
		}
		r.closeListeners()
		if r.cluster != nil {
			r.publish.Store(nil)
			r.cluster.node.Shutdown()
		}
		if r.discovery != nil {
			r.discovery.Close()
		}
		if r.bus != nil {
			r.bus.Close()
		}
		if r.router != nil {
			r.router.Stop()
		}
	})
}

// closeListeners closes listeners no server took over (a start that
// failed between listen and serve); closing a served one again is
// harmless.
func (r *Replica) closeListeners() {
	for _, ln := range []net.Listener{r.ln, r.adminLn, r.grpcLn, r.eppLn} {
		if ln != nil {
			_ = ln.Close() // already closed by its server, or never served: nothing to report
		}
	}
}

func (r *Replica) closeWarm() {
	if r.stopWarm != nil {
		close(r.stopWarm)
	}
}
