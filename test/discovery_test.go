package test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/discovery"
	"github.com/kvrouter/kvrouter/internal/dnstest"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// plainFleet is a fleet of mock engines that never heartbeat, as plain
// vLLM or SGLang: each on its own loopback address (127.0.0.N) with the
// same HTTP, ZMQ KV-event and replay ports, as pods behind a headless
// Service are.
type plainFleet struct {
	t                     testing.TB
	httpPort, zmq, replay int
	engines               map[string]*plainEngine
}

type plainEngine struct {
	ip   string
	srv  *mockengine.Server
	stop func()
}

func newPlainFleet(t testing.TB) *plainFleet {
	t.Helper()
	return &plainFleet{t: t, httpPort: freePortOn(t, "127.0.0.2"), zmq: freePortOn(t, "127.0.0.2"),
		replay: freePortOn(t, "127.0.0.2"), engines: map[string]*plainEngine{}}
}

func freePortOn(t testing.TB, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs an engine on ip with the given metric names.
func (f *plainFleet) start(ip, flavor string) *plainEngine {
	t := f.t
	t.Helper()
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: fmt.Sprintf("tcp://%s:%d", ip, f.zmq), ReplayEndpoint: fmt.Sprintf("tcp://%s:%d", ip, f.replay),
		Encoding: zmqevents.EncodingArray, BlockSize: 16, DPSize: 1, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mockengine.DefaultServerConfig()
	cfg.Engine.Speedup = 20
	cfg.MetricsFlavor = flavor
	cfg.ShutdownGrace = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := mockengine.NewServer(cfg, pub)
	if err != nil {
		t.Fatal(err)
	}
	pub.TapEngine(srv.Engine())
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(f.httpPort)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	e := &plainEngine{ip: ip, srv: srv}
	e.stop = func() { cancel(); <-done; _ = pub.Close() }
	t.Cleanup(func() {
		if f.engines[ip] == e {
			e.stop()
		}
	})
	f.engines[ip] = e
	return e
}

func (f *plainFleet) kill(ip string) {
	if e := f.engines[ip]; e != nil {
		delete(f.engines, ip)
		e.stop()
	}
}

// id is the worker id every replica derives for the engine on ip.
func (f *plainFleet) id(ip string) uint64 {
	return uint64(discovery.WorkerID("dns/" + net.JoinHostPort(ip, strconv.Itoa(f.httpPort))))
}

func (f *plainFleet) uri(dnsName, server string) string {
	return fmt.Sprintf("dns://%s:%d?server=%s&kv-events-port=%d&replay-port=%d", dnsName, f.httpPort, server, f.zmq, f.replay)
}

// routeTo asks for a route restricted to one worker: 200 when that
// worker takes new requests.
func routeTo(t testing.TB, base string, worker uint64) (int, routeReply) {
	var reply routeReply
	code := Post(t, base+"/route", map[string]any{"token_ids": tokens(64, 7), "update_states": false,
		"allowed_worker_ids": []uint64{worker}}, &reply)
	return code, reply
}

func discoveryReplica(t testing.TB, uri string, interval time.Duration, mutate func(*config.Config)) *replica.Replica {
	return StartReplica(t, func(c *config.Config) {
		c.Discover = []string{uri}
		c.DiscoverInterval = interval
		c.EnginePollInterval = interval
		c.EnginePollMaxBackoff = 2 * interval
		c.DrainGrace = time.Second
		if mutate != nil {
			mutate(c)
		}
	})
}

// TestDNSDiscovery: a real DNS server on loopback whose records change
// while the router runs. An engine added to the answer takes routes
// within two intervals, its ZMQ KV events are indexed (a completion's
// prefix attracts the next request), and an engine removed from the
// answer stops taking new routes within two intervals and is removed
// after the drain grace.
func TestDNSDiscovery(t *testing.T) {
	const interval = 200 * time.Millisecond
	dns := dnstest.Start(t)
	fleet := newPlainFleet(t)
	fleet.start("127.0.0.2", mockengine.MetricsVLLM)
	dns.SetIPs("engines.test", "127.0.0.2")
	rep := discoveryReplica(t, fleet.uri("engines.test.", dns.Addr()), interval, nil)
	base := BaseURL(rep)
	a, b := fleet.id("127.0.0.2"), fleet.id("127.0.0.3")
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, r := routeTo(t, base, a); code != http.StatusOK {
			return fmt.Errorf("engine a not routable: %d %s", code, r.Error)
		}
		return nil
	})

	// Scale out: a second engine joins the Service.
	fleet.start("127.0.0.3", mockengine.MetricsSGLang)
	dns.SetIPs("engines.test", "127.0.0.2", "127.0.0.3")
	took := testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, r := routeTo(t, base, b); code != http.StatusOK {
			return fmt.Errorf("engine b not routable: %d %s", code, r.Error)
		}
		return nil
	})
	if took > 2*interval+300*time.Millisecond {
		t.Errorf("new engine routable after %v, want within two intervals (%v)", took, 2*interval)
	}

	// Its KV events arrive over ZMQ: a completion sent to b directly
	// (kvrouter is not its only client) makes b the holder of the
	// prompt's prefix.
	prompt := tokens(320, 99)
	var reply map[string]any
	engineB := fmt.Sprintf("http://127.0.0.3:%d", fleet.httpPort)
	if code := Post(t, engineB+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1}, &reply); code != http.StatusOK {
		t.Fatalf("completion: %d %v", code, reply)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		var r routeReply
		Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &r)
		if r.WorkerID != b || r.OverlapBlocks < 19 {
			return fmt.Errorf("route %+v, want engine b with >= 19 cached blocks (its ZMQ events)", r)
		}
		return nil
	})

	// Scale in: a leaves the answer. No new routes within two intervals;
	// removed after the drain grace.
	dns.SetIPs("engines.test", "127.0.0.3")
	took = testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, r := routeTo(t, base, a); code != http.StatusServiceUnavailable {
			return fmt.Errorf("engine a still routable: %d %+v", code, r)
		}
		return nil
	})
	if took > 2*interval+300*time.Millisecond {
		t.Errorf("gone engine unroutable after %v, want within two intervals (%v)", took, 2*interval)
	}
	for range 20 {
		var r routeReply
		if code := Post(t, base+"/route", map[string]any{"token_ids": tokens(48, uint32(time.Now().UnixNano()%1000)),
			"update_states": false}, &r); code != http.StatusOK || r.WorkerID != b {
			t.Fatalf("route while a drains: %d %+v, want engine b", code, r)
		}
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		for _, w := range workers(t, base).Workers {
			if w.WorkerID == a {
				return fmt.Errorf("engine a still registered")
			}
		}
		return nil
	})
	// The DNS server goes away: counted, and the fleet stays as it was.
	dns.Stop()
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		_, m := Get(t, base+"/metrics")
		if metricSum(m, `kvrouter_discovery_errors_total{source="dns_unreachable"}`) < 1 {
			return fmt.Errorf("unreachable DNS server not counted:\n%s", grepLines(m, "kvrouter_discovery"))
		}
		return nil
	})
	if code, r := routeTo(t, base, b); code != http.StatusOK {
		t.Fatalf("engine b dropped while DNS was unreachable: %d %s", code, r.Error)
	}
}

// TestEngineHealthAndLoad: mock engines with vLLM- and SGLang-named
// /metrics. One reports its waiting queue far over the threshold, one
// fails /health: both stop taking new routes, and come back when they
// recover.
func TestEngineHealthAndLoad(t *testing.T) {
	const interval = 100 * time.Millisecond
	dns := dnstest.Start(t)
	fleet := newPlainFleet(t)
	vllm := fleet.start("127.0.0.2", mockengine.MetricsVLLM)
	sglang := fleet.start("127.0.0.3", mockengine.MetricsSGLang)
	fleet.start("127.0.0.4", mockengine.MetricsVLLM)
	dns.SetIPs("engines.test", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	rep := discoveryReplica(t, fleet.uri("engines.test.", dns.Addr()), interval, nil)
	base := BaseURL(rep)
	ids := []uint64{fleet.id("127.0.0.2"), fleet.id("127.0.0.3"), fleet.id("127.0.0.4")}
	routable := func(want ...bool) error {
		for i, id := range ids {
			code, r := routeTo(t, base, id)
			if (code == http.StatusOK) != want[i] {
				return fmt.Errorf("engine %d: %d %s, want routable=%v", i, code, r.Error, want[i])
			}
		}
		return nil
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error { return routable(true, true, true) })

	vllm.srv.SetExtraWaiting(1000) // far over the default threshold (128)
	sglang.srv.SetHealthy(false)
	testutil.EventuallyNil(t, 10*time.Second, func() error { return routable(false, false, true) })
	code, r := routeTo(t, base, ids[0])
	if code != http.StatusServiceUnavailable || !strings.Contains(r.Error, "busy") {
		t.Fatalf("busy engine: %d %q", code, r.Error)
	}
	if code, r := routeTo(t, base, ids[1]); !strings.Contains(r.Error, "unhealthy") {
		t.Fatalf("unhealthy engine: %d %q", code, r.Error)
	}
	for range 10 {
		var r routeReply
		if Post(t, base+"/route", map[string]any{"token_ids": tokens(48, 3), "update_states": false}, &r); r.WorkerID != ids[2] {
			t.Fatalf("routed to %d, want the healthy idle engine %d", r.WorkerID, ids[2])
		}
	}
	_, m := Get(t, base+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`kvrouter_engine_requests_waiting{dp_rank="0",worker_id="%d"} 1000`, ids[0]),
		fmt.Sprintf(`kvrouter_worker_routable{dp_rank="0",worker_id="%d"} 0`, ids[0]),
		fmt.Sprintf(`kvrouter_worker_routable{dp_rank="0",worker_id="%d"} 1`, ids[2]),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "kvrouter_"))
		}
	}
	if metricSum(m, `kvrouter_engine_transitions_total{source="unhealthy"}`) < 1 || metricSum(m, `kvrouter_engine_transitions_total{source="busy"}`) < 1 {
		t.Errorf("transitions not counted:\n%s", grepLines(m, "kvrouter_engine"))
	}

	vllm.srv.SetExtraWaiting(0)
	sglang.srv.SetHealthy(true)
	testutil.EventuallyNil(t, 10*time.Second, func() error { return routable(true, true, true) })

	// A pod's worth of crash: the engine's process dies (connection
	// refused) and comes back.
	fleet.kill("127.0.0.4")
	testutil.EventuallyNil(t, 10*time.Second, func() error { return routable(true, true, false) })
	fleet.start("127.0.0.4", mockengine.MetricsVLLM)
	testutil.EventuallyNil(t, 10*time.Second, func() error { return routable(true, true, true) })
}

// TestReplicasAgreeOnDiscoveredFleet: two replicas of one cluster run
// discovery independently and reach the same registry — the same worker
// ids and registry digest.
func TestReplicasAgreeOnDiscoveredFleet(t *testing.T) {
	const interval = 100 * time.Millisecond
	dns := dnstest.Start(t)
	fleet := newPlainFleet(t)
	fleet.start("127.0.0.2", mockengine.MetricsVLLM)
	fleet.start("127.0.0.3", mockengine.MetricsVLLM)
	dns.SetIPs("engines.test", "127.0.0.2", "127.0.0.3")
	uri := fleet.uri("engines.test.", dns.Addr())
	first := discoveryReplica(t, uri, interval, func(c *config.Config) { c.ClusterBind = "127.0.0.1:0"; c.ClusterFast = true })
	second := discoveryReplica(t, uri, interval, func(c *config.Config) {
		c.ClusterBind = "127.0.0.1:0"
		c.ClusterFast = true
		c.NATSURL = first.NATSURL()
		c.ClusterJoin = []string{first.ClusterAddr()}
	})
	want := []uint64{fleet.id("127.0.0.2"), fleet.id("127.0.0.3")}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	check := func() error {
		var digests []uint64
		for _, rep := range []*replica.Replica{first, second} {
			st, err := rep.Router().Status(context.Background(), false)
			if err != nil {
				return err
			}
			var got []uint64
			for _, w := range st.Workers {
				got = append(got, w.WorkerID)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s has workers %v, want %v", rep.ID(), got, want)
			}
			digests = append(digests, st.RegistryDigest)
		}
		if digests[0] != digests[1] || digests[0] == 0 {
			return fmt.Errorf("registry digests %v differ", digests)
		}
		return nil
	}
	testutil.EventuallyNil(t, 10*time.Second, check)
	dns.SetIPs("engines.test", "127.0.0.3")
	want = []uint64{fleet.id("127.0.0.3")}
	testutil.EventuallyNil(t, 10*time.Second, check) // after the drain grace

	// The cluster's anti-entropy digests carry the registry digest: a
	// worker only one replica has is seen by its peer.
	if err := first.Router().RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 77, Url: "http://127.0.0.9:1"}, true); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		_, m := Get(t, BaseURL(second)+"/metrics")
		if metricSum(m, "kvrouter_registry_digest_mismatches_total") < 1 {
			return fmt.Errorf("registries differ and the peer did not notice:\n%s", grepLines(m, "kvrouter_registry"))
		}
		return nil
	})
}

// --engine-poll all: a static worker (no discovery) is polled too, and
// stops taking routes while its /health fails.
func TestEnginePollAllStaticWorkers(t *testing.T) {
	fleet := newPlainFleet(t)
	e := fleet.start("127.0.0.2", mockengine.MetricsVLLM)
	rep := StartReplica(t, func(c *config.Config) {
		c.StaticWorkers = []string{fmt.Sprintf("5=http://127.0.0.2:%d", fleet.httpPort)}
		c.EnginePoll = config.EnginePollAll
		c.EnginePollInterval = 100 * time.Millisecond
		c.EnginePollMaxBackoff = 200 * time.Millisecond
	})
	base := BaseURL(rep)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, r := routeTo(t, base, 5); code != http.StatusOK {
			return fmt.Errorf("static worker: %d %s", code, r.Error)
		}
		return nil
	})
	e.srv.SetHealthy(false)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if _, r := routeTo(t, base, 5); !strings.Contains(r.Error, "unhealthy") {
			return fmt.Errorf("static worker with a failing /health: %q", r.Error)
		}
		return nil
	})
	e.srv.SetHealthy(true)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, r := routeTo(t, base, 5); code != http.StatusOK {
			return fmt.Errorf("recovered static worker: %d %s", code, r.Error)
		}
		return nil
	})
}
