package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
)

// workerSet is N in-process mock workers on loopback random ports.
type workerSet struct {
	servers []*mockengine.Server
	urls    []string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errs    chan error

	stopOnce sync.Once
	stopErr  error
}

// startWorkers serves n mock workers, each publishing through pub (nil:
// no events or heartbeats), and waits until each answers /health.
func startWorkers(ctx context.Context, opts FleetOptions, pub mockengine.Publisher) (*workerSet, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	sctx, cancel := context.WithCancel(context.Background())
	ws := &workerSet{cancel: cancel, errs: make(chan error, opts.Workers)}
	for i := range opts.Workers {
		cfg := mockengine.DefaultServerConfig()
		cfg.Engine = opts.Engine
		cfg.Engine.WorkerID = kv.WorkerID(i + 1)
		cfg.Engine.BlockSize = opts.BlockSize
		cfg.Role = opts.role(i)
		cfg.HeartbeatInterval = 200 * time.Millisecond
		cfg.ShutdownGrace = time.Second
		cfg.Logger = log.With("worker", i+1)
		srv, err := mockengine.NewServer(cfg, pub)
		if err != nil {
			ws.stop(context.Background())
			return nil, fmt.Errorf("mock worker %d: %w", i+1, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ws.stop(context.Background())
			return nil, fmt.Errorf("listen for mock worker %d: %w", i+1, err)
		}
		ws.servers = append(ws.servers, srv)
		ws.urls = append(ws.urls, "http://"+ln.Addr().String())
		ws.wg.Go(func() {
			if err := srv.Serve(sctx, ln); err != nil {
				ws.errs <- err
			}
		})
	}
	for _, u := range ws.urls {
		if err := waitHealthy(ctx, u+"/health"); err != nil {
			ws.stop(context.Background())
			return nil, err
		}
	}
	return ws, nil
}

// stop ends every worker and waits for them (bounded by ctx). Later
// calls return the first call's result.
func (ws *workerSet) stop(ctx context.Context) error {
	ws.stopOnce.Do(func() { ws.stopErr = ws.stopNow(ctx) })
	return ws.stopErr
}

func (ws *workerSet) stopNow(ctx context.Context) error {
	ws.cancel()
	done := make(chan struct{})
	go func() { ws.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("mock workers did not stop: %w", ctx.Err())
	}
	close(ws.errs)
	var errs []error
	for err := range ws.errs {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitHealthy polls url until it answers 200 or ctx/10 s runs out.
func waitHealthy(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("health check %s: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w", url, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// workersOnly is a fleet without a router, for the client-side policies:
// nothing consumes KV events, so none are published.
type workersOnly struct{ ws *workerSet }

func (f *workersOnly) RouterURLs() []string            { return nil }
func (f *workersOnly) WorkerURLs() []string            { return f.ws.urls }
func (f *workersOnly) Close(ctx context.Context) error { return f.ws.stop(ctx) }
