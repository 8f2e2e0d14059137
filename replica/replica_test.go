package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// testConfig is a replica on random loopback ports with a private store.
func testConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.NATSListen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.LogLevel = "warn"
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestSplitHostPort(t *testing.T) {
	host, port, err := splitHostPort("10.0.0.1:7946")
	if err != nil || host != "10.0.0.1" || port != 7946 {
		t.Fatalf("got %q %d %v", host, port, err)
	}
	if host, port, err = splitHostPort(":0"); err != nil || host != "" || port != 0 {
		t.Fatalf("got %q %d %v", host, port, err)
	}
	for _, bad := range []string{"10.0.0.1", "10.0.0.1:gossip", ""} {
		if _, _, err := splitHostPort(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDefaultReplicaIDsAreUniquePerBoot(t *testing.T) {
	a, b := defaultReplicaID(), defaultReplicaID()
	if !regexp.MustCompile(`^.+-[0-9a-f]{8}$`).MatchString(a) {
		t.Fatalf("id %q is not host-nonce", a)
	}
	if a == b {
		t.Fatalf("two boots got the same id %q", a)
	}
}

func TestServeRejectsBadInput(t *testing.T) {
	none := func(string) string { return "" }
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--block-size", "0"}, "invalid config"},
		{[]string{"--log-level", "loud"}, "log level"},
		{[]string{"--no-such-flag"}, "parse flags"},
		{[]string{"stray"}, "unexpected arguments"},
	} {
		err := Serve(context.Background(), tt.args, none, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want one containing %q", tt.args, err, tt.want)
		}
	}
	// An environment value is checked like a flag.
	env := func(k string) string {
		if k == "KVROUTER_MAX_BODY_BYTES" {
			return "lots"
		}
		return ""
	}
	if err := Serve(context.Background(), nil, env, io.Discard); err == nil || !strings.Contains(err.Error(), "KVROUTER_MAX_BODY_BYTES") {
		t.Errorf("malformed environment: err = %v", err)
	}
}

// Serve is the whole process: it starts from flags and the environment,
// logs where it serves, answers HTTP, and shuts down cleanly when its
// context ends.
func TestServeRunsUntilCancelled(t *testing.T) {
	orig, origLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(orig); debug.SetMemoryLimit(origLimit) })

	var stderr testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := []string{"--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--log-level", "info", "--zmq-events=false", "--gc-percent", "300"}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, args, func(string) string { return "" }, &stderr) }()

	serving := regexp.MustCompile(`msg="kvrouter serving".* http=(\S+)`)
	var addr string
	testutil.Eventually(t, 30*time.Second, "the serving log line", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Serve returned %v before serving; stderr:\n%s", err, stderr.String())
		default:
		}
		m := serving.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	if line := serving.FindString(stderr.String()); !strings.Contains(line, "component=replica") {
		t.Errorf("serving line without the replica component: %s", line)
	}
	if code, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("GC percent %d, want --gc-percent's 300 (GOGC unset)", got)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if !strings.Contains(stderr.String(), `msg="shutting down"`) {
		t.Errorf("no shutdown line in:\n%s", stderr.String())
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Serve returned", addr)
	}
}

func TestStartRejectsInvalidConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPAddr = ""
	if _, err := Start(context.Background(), cfg, quiet()); err == nil || !strings.HasPrefix(err.Error(), "config:") {
		t.Fatalf("err = %v, want a config error", err)
	}
}

// A replica that fails half-way (here: a bad cluster address, after HTTP
// is listening) stops what it started.
func TestStartFailureReleasesWhatStarted(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPAddr = testutil.FreeAddr(t)
	cfg.ClusterBind = "no-port"
	_, err := Start(context.Background(), cfg, quiet())
	if err == nil || !strings.Contains(err.Error(), "--cluster-bind") {
		t.Fatalf("err = %v, want one naming --cluster-bind", err)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		t.Fatalf("HTTP address still taken after the failed start: %v", err)
	}
	ln.Close()
}

var workerSeries = regexp.MustCompile(`kvrouter_worker_active_requests\{dp_rank="\d+",worker_id="(\d+)"\}`)

// metricWorkers lists the worker ids in a /metrics scrape.
func metricWorkers(body string) map[string]bool {
	out := map[string]bool{}
	for _, m := range workerSeries.FindAllStringSubmatch(body, -1) {
		out[m[1]] = true
	}
	return out
}

// One replica in-process: static workers are registered, heartbeats over
// NATS register workers and a block-size mismatch is refused and counted,
// the scrape-time state reaches /metrics, and Shutdown stops it all.
func TestReplicaLifecycle(t *testing.T) {
	cfg := testConfig(t)
	cfg.StaticWorkers = []string{"5=http://127.0.0.1:9"}
	rep, err := Start(context.Background(), cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Kill() })
	base := "http://" + rep.HTTPAddr()
	testutil.EventuallyNil(t, 20*time.Second, rep.Ready)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if rep.ClusterAddr() != "" || rep.Members() != nil || !rep.isSnapshotter() {
		t.Fatalf("single replica: cluster addr %q, members %v, snapshotter %v", rep.ClusterAddr(), rep.Members(), rep.isSnapshotter())
	}

	nc, err := nats.Connect(rep.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, hb := range []string{
		`{"worker_id":9,"url":"http://127.0.0.1:9","data_parallel_size":1,"block_size":32}`, // the router's is 16
		`{"worker_id":10,"url":"http://127.0.0.1:9","data_parallel_size":1,"block_size":16}`,
	} {
		if err := nc.Publish(cfg.WorkersSubject, []byte(hb)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Heartbeats are handled in order: once 10 is in, 9 was decided.
	var body string
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		var code int
		if code, body = get(t, base+"/metrics"); code != http.StatusOK {
			return fmt.Errorf("/metrics = %d", code)
		}
		if !metricWorkers(body)["10"] {
			return errors.New("worker 10 not registered")
		}
		return nil
	})
	if got := metricWorkers(body); !got["5"] || got["9"] || len(got) != 2 {
		t.Errorf("workers in /metrics %v, want the static 5 and the heartbeat's 10", got)
	}
	for _, want := range []string{
		`kvrouter_workers_rejected_total{reason="block_size_mismatch"} 1`,
		"kvrouter_registered_workers 2",
		`kvrouter_replica_info{replica="` + rep.ID() + `"} 1`,
		"kvrouter_ready 1",
		"kvrouter_nats_connected 1",
		`kvrouter_heartbeats_received_total{source="nats"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rep.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := rep.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if rep.Ready() == nil {
		t.Error("ready after shutdown")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("HTTP still answers after shutdown")
	}
}

// A NATS address already taken fails the start with an error naming it,
// not a panic (the bus's cleanup once ran on the nil it had returned).
func TestStartWithTakenNATSAddressFailsCleanly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := testConfig(t)
	cfg.HTTPAddr = testutil.FreeAddr(t)
	cfg.NATSListen = taken.Addr().String()
	_, err = Start(context.Background(), cfg, quiet())
	if err == nil {
		t.Fatal("a replica started on a NATS address another process holds")
	}
	t.Logf("start failed as it should: %v", err)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		t.Fatalf("HTTP address still taken after the failed start: %v", err)
	}
	ln.Close()
}
