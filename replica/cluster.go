package replica

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
)

// clusterLink is the replica's membership in a multi-replica cluster.
type clusterLink struct {
	node       *cluster.Node
	minMembers int // --cluster-min-members
}

// joinCluster joins the memberlist cluster when --cluster-bind is set.
func (r *Replica) joinCluster(ctx context.Context) error {
	if r.cfg.ClusterBind == "" {
		return nil
	}
	if err := r.cfg.CheckClusterSecurity(); err != nil {
		return err
	}
	cc := cluster.DefaultConfig()
	if r.cfg.ClusterFast {
		cc = cluster.LocalTestConfig()
	}
	host, port, err := splitHostPort(r.cfg.ClusterBind)
	if err != nil {
		return fmt.Errorf("--cluster-bind: %w", err)
	}
	cc.ReplicaID, cc.BindAddr, cc.BindPort = r.id, host, port
	if r.cfg.ClusterAdvertise != "" {
		if cc.AdvertiseAddr, cc.AdvertisePort, err = splitHostPort(r.cfg.ClusterAdvertise); err != nil {
			return fmt.Errorf("--cluster-advertise: %w", err)
		}
	}
	cc.Join = r.cfg.ClusterJoin
	cc.BatchMaxEvents, cc.BatchInterval = r.cfg.ClusterBatchMaxEvents, r.cfg.ClusterBatchInterval
	cc.HTTPAddr, cc.Version, cc.Logger = r.HTTPAddrOrConfig(), Version(), r.base
	cc.KeyFile, cc.Label, cc.Insecure = r.cfg.ClusterKeyFile, r.cfg.ClusterLabel, r.cfg.ClusterInsecure
	cc.TLSCertFile, cc.TLSKeyFile, cc.TLSCAFile = r.cfg.ClusterTLSCert, r.cfg.ClusterTLSKey, r.cfg.ClusterTLSCA
	if r.discovery != nil && len(r.cfg.Discover) > 0 {
		// Peers compare their discovered fleets (cluster/registry.go).
		cc.RegistryDigest = r.discovery.digest.Load
	}
	node, err := cluster.Start(ctx, cc, routerSink{r.router})
	if err != nil {
		return fmt.Errorf("join cluster: %w", err)
	}
	r.cluster = &clusterLink{node: node, minMembers: r.cfg.ClusterMinMembers}
	pub := func(ev *messages.SequenceEvent) {
		if err := node.Publish(ev); err != nil {
			r.log.Debug("gossip publish refused", "err", err)
		}
	}
	r.publish.Store(&pub)
	r.gossipNode.Store(node)
	r.log.Info("joined cluster", "addr", node.LocalAddr(), "members", len(node.Members()))
	return nil
}

func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

// HTTPAddrOrConfig is the bound HTTP address once listening, else the
// configured one.
func (r *Replica) HTTPAddrOrConfig() string {
	if a := r.HTTPAddr(); a != "" {
		return a
	}
	return r.cfg.HTTPAddr
}

func (c *clusterLink) Addr() string { return c.node.LocalAddr() }

// Leave announces our departure so peers drop our requests at once.
func (c *clusterLink) Leave(ctx context.Context) error {
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	return c.node.Leave(timeout)
}

func (c *clusterLink) addState(st *metrics.State) {
	s := c.node.Stats()
	st.Gauges["cluster_members"] = float64(s.Members)
	st.Gauges["cluster_keys"] = float64(s.Keys)
	st.Gauges["cluster_health_score"] = float64(s.HealthScore)
	st.Gauges["cluster_expected_members"] = float64(c.node.ExpectedMembers(c.minMembers))
	ok := 1.0
	if c.node.Membership(c.minMembers) != nil {
		ok = 0
	}
	st.Gauges["cluster_membership_ok"] = ok
	// The primary key's id (cluster.KeyID: 8 hex digits of its SHA-256)
	// as a number, so a rotation step can be seen to have reached every
	// replica: printf '%d\n' 0x$(base64 -d <key | sha256sum | cut -c1-8).
	if ids := c.node.KeyIDs(); len(ids) > 0 {
		if v, err := strconv.ParseUint(ids[0], 16, 32); err == nil {
			st.Gauges["cluster_primary_key_id"] = float64(v)
		}
	}
	for name, v := range map[string]uint64{
		"gossip_events_published": s.EventsPublished, "gossip_events_dropped": s.EventsDropped,
		"gossip_events_sent": s.EventsSent, "gossip_batches": s.Batches, "gossip_bytes_sent": s.BytesSent,
		"gossip_send_errors": s.SendErrors, "gossip_events_received": s.EventsReceived,
		"gossip_events_lost": s.EventsLost, "gossip_digest_mismatches": s.DigestMismatches,
		"gossip_repairs": s.Repairs, "gossip_origins_dropped": s.OriginsDropped,
		"gossip_malformed": s.Malformed, "gossip_inbox_drops": s.InboxDrops,
		"gossip_streams_refused": s.StreamsRefused, "gossip_streams_over_limit": s.StreamsOverLimit,
		"gossip_stream_timeouts": s.StreamTimeouts, "gossip_foreign_frames": s.ForeignFrames,
		"gossip_unauthenticated": s.Unauthenticated, "gossip_key_changes": s.KeyChanges,
		"gossip_key_reload_errors": s.KeyReloadErrors, "gossip_ack_waits": s.AckWaits,
		// The failure detector (cluster/detector.go).
		"cluster_suspicions": s.Suspicions, "cluster_refutations": s.Refutations,
		"cluster_deaths": s.Deaths, "cluster_false_deaths": s.FalseDeaths,
		"cluster_degraded_probes": s.DegradedProbes,
		// memberlist's complaints about single inbound messages (logging.go).
		"cluster_rejected_messages": s.RejectedMessages,
		// Gossip no key of ours decrypts (membership.go).
		"cluster_key_mismatches": s.KeyMismatches,
	} {
		st.Counters = append(st.Counters, metrics.Counter{Name: name, Source: "memberlist", Value: v})
	}
	// Acknowledgements that stopped waiting for a peer, by reason
	// (cluster.Node.Sent).
	for reason, v := range map[string]uint64{
		cluster.SentTimeout: s.AckTimeouts, cluster.SentPeerQueueFull: s.AckQueueFull, cluster.SentStalled: s.AckStalled,
	} {
		st.Counters = append(st.Counters, metrics.Counter{Name: "gossip_ack_given_up", Source: reason, Value: v})
	}
	mismatches, diverged := c.node.RegistryAgreement()
	st.Counters = append(st.Counters, metrics.Counter{Name: "registry_digest_mismatches", Source: "memberlist", Value: mismatches})
	st.Gauges["registry_diverged_peers"] = float64(len(diverged))
}

// Members lists the cluster's live replicas (nil without a cluster).
func (r *Replica) Members() []cluster.Member {
	if r.cluster == nil {
		return nil
	}
	return r.cluster.node.Members()
}

// routerSink adapts the actors' façade to the cluster's Sink.
type routerSink struct{ r *actors.Router }

func (s routerSink) ApplyRemote(ev *messages.SequenceEvent) { s.r.ApplyRemote(ev) }

// ApplyRemoteBatch implements cluster.BatchSink.
func (s routerSink) ApplyRemoteBatch(evs []*messages.SequenceEvent) { s.r.ApplyRemoteBatch(evs) }
func (s routerSink) DropOrigin(origin string)                       { s.r.DropOrigin(origin) }
func (s routerSink) ReplaceOrigin(origin string, evs []*messages.SequenceEvent) {
	s.r.ReplaceOrigin(origin, evs)
}

func (s routerSink) OriginDigest(ctx context.Context, origin string) (cluster.Digest, error) {
	evs, _, err := s.r.ActiveRequests(ctx, &origin)
	if err != nil {
		return cluster.Digest{}, err
	}
	return cluster.DigestOf(evs), nil
}

func (s routerSink) OwnedRequests(ctx context.Context) ([]*messages.SequenceEvent, error) {
	own := s.r.Config().ReplicaID
	evs, _, err := s.r.ActiveRequests(ctx, &own)
	return evs, err
}

// SessionDigest implements cluster.SessionSink.
func (s routerSink) SessionDigest(ctx context.Context) (cluster.Digest, error) {
	d, err := s.r.SessionDigest(ctx)
	return cluster.Digest{Count: d.Count, Hash: d.Hash}, err
}

// SessionSnapshot implements cluster.SessionSink.
func (s routerSink) SessionSnapshot(ctx context.Context) ([]*messages.SequenceEvent, error) {
	return s.r.SessionSnapshot(ctx)
}

// MergeSessions implements cluster.SessionSink.
func (s routerSink) MergeSessions(evs []*messages.SequenceEvent) { s.r.MergeSessions(evs) }
