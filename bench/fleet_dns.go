package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/dnstest"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// DiscoveryDNS (FleetOptions.Discovery) runs the fleet as plain vLLM
// engines found through DNS: no heartbeats, KV events on each engine's
// own ZMQ publisher, the router resolving the fleet's name.
const DiscoveryDNS = "dns"

// dnsFleetName is the name the fleet's DNS server answers.
const dnsFleetName = "engines.kvbench."

// dnsWorkers is a DNS-discovered fleet's extras: the DNS server and the
// engines' ZMQ publishers.
type dnsWorkers struct {
	server *dnstest.Server
	pubs   []*mockengine.ZMQPublisher
}

func (d *dnsWorkers) close() {
	for _, p := range d.pubs {
		_ = p.Close() // the fleet is going away: nothing to do about a close error
	}
	if d.server != nil {
		d.server.Stop()
	}
}

// workerIP is the loopback address of worker i (127.0.0.2 onwards).
func workerIP(i int) string { return fmt.Sprintf("127.0.%d.%d", i/250, i%250+2) }

// startDNSWorkers serves the fleet as plain engines, each on its own
// loopback address with the same HTTP, ZMQ and replay ports (as pods
// behind a headless Service), and a DNS server on loopback answering
// dnsFleetName with their addresses. It returns the router's --discover
// URI.
func startDNSWorkers(ctx context.Context, opts FleetOptions) (*workerSet, *dnsWorkers, string, error) {
	var lastErr error
	for range 5 { // the ports must be free on every address: retry on a clash
		ws, d, uri, err := tryDNSWorkers(ctx, opts)
		if err == nil {
			return ws, d, uri, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, nil, "", lastErr
}

var errPortTaken = errors.New("port taken on a worker address")

func tryDNSWorkers(ctx context.Context, opts FleetOptions) (_ *workerSet, _ *dnsWorkers, _ string, err error) {
	var ports [3]int
	for i := range ports {
		ln, err := net.Listen("tcp", workerIP(0)+":0")
		if err != nil {
			return nil, nil, "", fmt.Errorf("pick a port: %w", err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	httpPort, zmqPort, replayPort := ports[0], ports[1], ports[2]
	d := &dnsWorkers{}
	sctx, cancel := context.WithCancel(context.Background())
	ws := &workerSet{cancel: cancel, errs: make(chan error, opts.Workers)}
	defer func() {
		if err != nil {
			_ = ws.stop(context.Background())
			d.close()
		}
	}()
	var ips []string
	for i := range opts.Workers {
		ip := workerIP(i)
		pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
			Endpoint: fmt.Sprintf("tcp://%s:%d", ip, zmqPort), ReplayEndpoint: fmt.Sprintf("tcp://%s:%d", ip, replayPort),
			Encoding: zmqevents.EncodingArray, BlockSize: opts.BlockSize, DPSize: max(opts.Engine.DPSize, 1),
			Logger: opts.Logger.With("worker", ip),
		})
		if err != nil {
			return nil, nil, "", errors.Join(errPortTaken, fmt.Errorf("mock worker %s ZMQ: %w", ip, err))
		}
		d.pubs = append(d.pubs, pub)
		cfg := mockengineServerConfig(opts, kv.WorkerID(i+1))
		cfg.Logger = opts.Logger.With("worker", ip)
		srv, err := mockengine.NewServer(cfg, pub)
		if err != nil {
			return nil, nil, "", fmt.Errorf("mock worker %s: %w", ip, err)
		}
		pub.TapEngine(srv.Engine())
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(httpPort)))
		if err != nil {
			return nil, nil, "", errors.Join(errPortTaken, fmt.Errorf("listen for mock worker %s: %w", ip, err))
		}
		ws.servers = append(ws.servers, srv)
		ws.urls = append(ws.urls, "http://"+ln.Addr().String())
		ws.wg.Go(func() {
			if err := srv.Serve(sctx, ln); err != nil {
				ws.errs <- err
			}
		})
		ips = append(ips, ip)
	}
	for _, u := range ws.urls {
		if err := waitHealthy(ctx, u+"/health"); err != nil {
			return nil, nil, "", err
		}
	}
	if d.server, err = dnstest.New("127.0.0.1:0"); err != nil {
		return nil, nil, "", fmt.Errorf("fleet DNS server: %w", err)
	}
	d.server.SetIPs(dnsFleetName, ips...)
	uri := fmt.Sprintf("dns://%s:%d?server=%s&kv-events-port=%d&replay-port=%d&block-size=%d&dp-size=%d",
		dnsFleetName, httpPort, d.server.Addr(), zmqPort, replayPort, opts.BlockSize, max(opts.Engine.DPSize, 1))
	return ws, d, uri, nil
}

// mockengineServerConfig is a fleet worker's server config (the same as
// startWorkers').
func mockengineServerConfig(opts FleetOptions, id kv.WorkerID) mockengine.ServerConfig {
	cfg := mockengine.DefaultServerConfig()
	cfg.Engine = opts.Engine
	cfg.Engine.WorkerID = id
	cfg.Engine.BlockSize = opts.BlockSize
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.ShutdownGrace = time.Second
	return cfg
}
