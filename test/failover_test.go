package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/replica"
)

// startHAProxy puts HAProxy (from Debian's packages; `make test` installs
// it) in front of the replicas, with /readyz health checks and retries on
// connection failure, as deploy/local/haproxy.cfg does.
func startHAProxy(t *testing.T, reps []*replica.Replica) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (make test installs it with apt-get): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var servers strings.Builder
	for i, r := range reps {
		fmt.Fprintf(&servers, "    server r%d %s check\n", i, r.HTTPAddr())
	}
	cfg := fmt.Sprintf(`global
    maxconn 1024
defaults
    mode http
    timeout connect 500ms
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch 1
    option http-buffer-request
    retry-on conn-failure empty-response response-timeout
frontend fe
    bind %s
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 200ms fall 2 rise 2
%s`, addr, servers.String())
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-f", path, "-db")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("LB answers %d", resp.StatusCode)
		}
		return nil
	})
	return base
}

// TestFailoverBehindLoadBalancer kills a replica (no leave, sockets shut
// as by kill -9) while clients send completions through HAProxy: no
// client request fails, and the peers drop the dead replica's in-flight
// requests within memberlist's failure-detection bound.
func TestFailoverBehindLoadBalancer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 replicas, 4 engines and HAProxy")
	}
	reps := startCluster(t, 3)
	for id := uint64(1); id <= 4; id++ {
		StartMockWorker(t, reps[0], id, nil)
	}
	for _, r := range reps {
		base := BaseURL(r)
		Eventually(t, 10*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != 4 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}
	lb := startHAProxy(t, reps)
	victim := reps[1]

	// A long streamed request owned by the victim: its peers must drop it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]any{"prompt": tokens(256, 99), "max_tokens": 100000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, BaseURL(victim)+"/v1/completions", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	survivors := []string{BaseURL(reps[0]), BaseURL(reps[2])}
	Eventually(t, 5*time.Second, func() error {
		for _, b := range survivors {
			if n := totalActive(t, b); n < 1 {
				return fmt.Errorf("%s does not see the victim's request", b)
			}
		}
		return nil
	})

	// Clients through the load balancer.
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for c := 0; c < 6; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b, _ := json.Marshal(map[string]any{"prompt": tokens(256, uint32(c*1000+i%8)), "max_tokens": 4})
				resp, err := client.Post(lb+"/v1/completions", "application/json", bytes.NewReader(b))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				_, _ = bufio.NewReader(resp.Body).Discard(1 << 20)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d", resp.StatusCode))
					continue
				}
				ok.Add(1)
			}
		}(c)
	}
	time.Sleep(1500 * time.Millisecond)
	killed := time.Now()
	victim.Kill()
	bound := cluster.LocalTestConfig().FailureDetectionBound(3)
	Eventually(t, bound+2*time.Second, func() error {
		for _, b := range survivors {
			if m := len(workersMembers(t, b)); m > 2 {
				return fmt.Errorf("%s still counts %d members", b, m)
			}
		}
		return nil
	})
	dropped := time.Since(killed)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	cancel()
	t.Logf("requests through the LB: %d ok, %d failed; victim's requests dropped by peers %v after the kill (bound %v)",
		ok.Load(), failed.Load(), dropped, bound)
	if failed.Load() != 0 {
		t.Fatalf("%d client requests failed (first: %v)", failed.Load(), firstErr.Load())
	}
	if ok.Load() < 20 {
		t.Fatalf("only %d requests completed", ok.Load())
	}
	if dropped > bound+time.Second {
		t.Fatalf("peers took %v to drop the dead replica, bound %v", dropped, bound)
	}
	// Nothing of the victim's stays in the survivors' load view.
	Eventually(t, 5*time.Second, func() error {
		for _, b := range survivors {
			if n := totalActive(t, b); n != 0 {
				return fmt.Errorf("%s holds %d requests after the load stopped", b, n)
			}
		}
		return nil
	})
}

// workersMembers reads the cluster members a replica reports on /metrics.
func workersMembers(t *testing.T, base string) []string {
	_, m := Get(t, base+"/metrics")
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "kvrouter_cluster_members ") {
			var n int
			fmt.Sscanf(strings.TrimPrefix(line, "kvrouter_cluster_members "), "%d", &n)
			return make([]string, n)
		}
	}
	return nil
}
