package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/redial"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/natsbus"
)

// bus is the replica's NATS side: the embedded server (if any), the
// connection, and the two ingestion sources.
type bus struct {
	url        string
	embedded   *natsbus.Embedded
	snapshots  *natsbus.SnapshotStore // nil without JetStream
	zmq        *zmqLink               // nil with --zmq-events=false
	nc         *nats.Conn
	events     *natsbus.EventSource
	heartbeats *natsbus.HeartbeatSource
	rejected   map[string]uint64
}

// base is the replica's logger without a component: natsbus and zmqevents
// add theirs, the bus's own messages are the replica's.
// admit applies the worker-address policy to a heartbeat (false: refused,
// counted and logged by admit).
func startBus(ctx context.Context, cfg config.Config, id string, router *actors.Router, m *metrics.Router, base *slog.Logger,
	admit func(hb events.Heartbeat, zmq bool) bool) (b *bus, err error) {
	log := base.With("component", "replica")
	b = &bus{url: cfg.NATSURL}
	// The error returns below set b to nil, so the cleanup keeps its own
	// reference to what was started.
	started := b
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	natsWaits := &redial.Waits{}
	m.Links.RegisterBackoff("nats", natsWaits.Max)
	observe := natsbus.ObserveReconnects(func(reason string) { m.Links.Reconnect("nats", reason) }, natsWaits)
	auth, err := cfg.NATSAuth()
	if err != nil {
		return nil, err
	}
	if b.url == "" {
		b.embedded, err = natsbus.StartEmbedded(natsbus.EmbeddedConfig{
			Listen: cfg.NATSListen, StoreDir: filepath.Join(cfg.DataDir, "nats"), JetStream: cfg.JetStream,
			User: auth.User, Password: auth.Password, NkeySeedFile: auth.NkeySeedFile, CredsFile: auth.CredsFile,
			ConfigFile: cfg.NATSServerConfig, TLSCert: cfg.NATSTLSCert, TLSKey: cfg.NATSTLSKey, Insecure: cfg.NATSInsecure,
		})
		if err != nil {
			return nil, err
		}
		b.url = b.embedded.ClientURL()
		log.Info("embedded NATS started", "url", b.url)
		b.nc, err = b.embedded.Dial(ctx, "kvrouter-"+id, base, auth, observe)
	} else {
		var opts []nats.Option
		if opts, err = auth.Options(); err == nil {
			b.nc, err = natsbus.Connect(ctx, b.url, "kvrouter-"+id, base, append(opts, observe)...)
		}
	}
	if err != nil {
		return nil, err
	}
	stream := ""
	var startSeq uint64
	if cfg.JetStream {
		stream = cfg.KVEventsStream
		if startSeq, err = b.loadSnapshot(ctx, cfg, router, log); err != nil {
			return nil, err
		}
	}
	b.events, err = natsbus.StartEventSource(ctx, b.nc, natsbus.EventSourceConfig{
		Subject: cfg.KVEventsSubject, Stream: stream, MaxAge: cfg.KVEventsMaxAge, MaxMsgs: cfg.KVEventsMaxMsgs,
		MaxBytes: cfg.KVEventsMaxBytes, StartSeq: startSeq, Log: base, Trust: router,
		OnDrop: m.EventDropped, // events of an unknown type, by reason
	}, router.ApplyEvent)
	if err != nil {
		return nil, err
	}
	if cfg.ZMQEvents || len(cfg.ZMQEndpoints) > 0 {
		if b.zmq, err = startZMQ(cfg, router, base, m.EventDropped, m.Links); err != nil {
			return nil, err
		}
	}
	// A heartbeat whose block size is not the router's is refused by the
	// source, counted, and logged once per worker (then once a minute).
	hbCfg := natsbus.HeartbeatSourceConfig{Subject: cfg.WorkersSubject, Log: base, BlockSize: cfg.BlockSize,
		OnReject: func(hb events.Heartbeat, reason string) {
			m.WorkerRejected(reason)
			router.RemoveWorker(kv.WorkerID(hb.WorkerID))
		}}
	b.heartbeats, err = natsbus.StartHeartbeatSourceWith(b.nc, hbCfg, func(hb events.Heartbeat) {
		if !admit(hb, b.zmq != nil) {
			return
		}
		// Not waited for: a fleet's heartbeats arriving together publish
		// one rank table (a refusal, registry full, is logged and counted
		// by the registry; the next heartbeat retries).
		if err := router.AnnounceWorker(hb.Proto(), false); err != nil {
			log.Warn("worker heartbeat not registered", "worker", hb.WorkerID, "err", err)
			return
		}
		if b.zmq != nil {
			b.zmq.heartbeat(hb)
		}
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Ready needs a live connection and a caught-up replay.
func (b *bus) Ready() error {
	if b.nc == nil || !b.nc.IsConnected() {
		return errors.New("NATS is not connected")
	}
	if b.events == nil || !b.events.Ready() {
		return errors.New("KV event replay has not caught up yet")
	}
	return nil
}

func (b *bus) addState(st *metrics.State) {
	connected := 0.0
	if b.nc != nil && b.nc.IsConnected() {
		connected = 1
	}
	st.Gauges["nats_connected"] = connected
	if b.events != nil {
		es := b.events.Stats()
		st.Counters = append(st.Counters,
			metrics.Counter{Name: "kv_event_messages", Source: b.events.Mode(), Value: es.Messages},
			metrics.Counter{Name: "kv_events_received", Source: b.events.Mode(), Value: es.Events},
			metrics.Counter{Name: "kv_event_id_gaps", Source: "nats", Value: es.Gaps},
			metrics.Counter{Name: "kv_event_id_reordered", Source: "nats", Value: es.Reordered},
			metrics.Counter{Name: "kv_event_stream_gaps", Source: "nats", Value: es.StreamGaps},
			metrics.Counter{Name: "kv_event_unknown_fields", Source: "nats", Value: es.UnknownFields},
		)
		for reason, n := range es.Malformed {
			st.Counters = append(st.Counters, metrics.Counter{Name: "kv_events_malformed", Source: reason, Value: n})
		}
	}
	if b.zmq != nil {
		b.zmq.addState(st)
	}
	if b.heartbeats != nil {
		recv, bad := b.heartbeats.Stats()
		st.Counters = append(st.Counters,
			metrics.Counter{Name: "heartbeats_received", Source: "nats", Value: recv},
			metrics.Counter{Name: "heartbeats_malformed", Source: "nats", Value: bad})
	}
}

// Close stops ingestion, then the connection, then the embedded server.
func (b *bus) Close() {
	if b.events != nil {
		b.events.Close()
	}
	if b.heartbeats != nil {
		b.heartbeats.Close()
	}
	if b.zmq != nil {
		b.zmq.Close()
	}
	if b.nc != nil {
		// No Drain: it is asynchronous (a Close right after it cut it
		// short), and with the sources closed nothing is left to drain.
		// Close flushes what is still buffered for publication.
		b.nc.Close()
	}
	if b.embedded != nil {
		b.embedded.Shutdown()
	}
}

// loadSnapshot applies the latest index snapshot, if any, and returns the
// stream sequence to read from next (0 = from the start). Without
// JetStream object stores (an external NATS without them) it logs and
// reads the whole stream.
func (b *bus) loadSnapshot(ctx context.Context, cfg config.Config, router *actors.Router, log *slog.Logger) (uint64, error) {
	store, err := natsbus.NewSnapshotStore(ctx, b.nc, natsbus.SnapshotStoreConfig{
		Bucket: cfg.SnapshotBucket, Stream: cfg.KVEventsStream, MaxBytes: cfg.SnapshotMaxBytes,
	})
	if err != nil {
		log.Warn("index snapshots unavailable", "err", err)
		return 0, nil
	}
	b.snapshots = store
	evs, seq, err := store.Load(ctx)
	if errors.Is(err, natsbus.ErrNoSnapshot) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load index snapshot: %w", err)
	}
	applied := 0
	for _, m := range evs {
		ev, err := events.FromProto(m)
		if err != nil {
			log.Warn("skipping a bad snapshot entry", "err", err)
			continue
		}
		router.ApplyEvent(&ev)
		applied++
	}
	log.Info("index snapshot loaded", "events", applied, "stream_seq", seq)
	return seq + 1, nil
}
