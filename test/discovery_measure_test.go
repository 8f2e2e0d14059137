//go:build !nokube

package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/discovery"
	"github.com/kvrouter/kvrouter/internal/dnstest"
	"github.com/kvrouter/kvrouter/mockengine"
)

// TestMeasureDiscoveryLatency measures, over 20 trials each, the time
// from an engine's appearance (a DNS record, a Ready pod) to the first
// route that may go to it, and from its disappearance (record removed,
// pod deleted, pod NotReady) or a failed health check to no new routes,
// at the default intervals (--discover-interval 5s, --engine-poll-interval
// 1s). A probe asks /route restricted to the engine every 2 ms.
//
//	KVROUTER_MEASURE_DISCOVERY=1 go test -run TestMeasureDiscoveryLatency -v -timeout 30m ./test/
func TestMeasureDiscoveryLatency(t *testing.T) {
	if os.Getenv("KVROUTER_MEASURE_DISCOVERY") == "" {
		t.Skip("set KVROUTER_MEASURE_DISCOVERY=1 to measure")
	}
	trials := 20
	if n, _ := strconv.Atoi(os.Getenv("KVROUTER_MEASURE_TRIALS")); n > 0 {
		trials = n
	}
	dnsInterval := config.Default().DiscoverInterval
	if d, err := time.ParseDuration(os.Getenv("KVROUTER_MEASURE_DNS_INTERVAL")); err == nil {
		dnsInterval = d
	}
	results := map[string][]time.Duration{}
	t.Run("dns", func(t *testing.T) { measureDNS(t, trials, dnsInterval, results) })
	t.Run("kubernetes", func(t *testing.T) { measureKube(t, trials, results) })
	fmt.Printf("\ndiscovery latency, %d trials each (p50 / p99 / max), DNS interval %v, engine poll interval %v:\n",
		trials, dnsInterval, config.Default().EnginePollInterval)
	for _, name := range []string{"dns: record added -> first route", "dns: record removed -> no new routes",
		"k8s: Ready pod created -> first route", "k8s: pod deleted -> no new routes", "k8s: pod NotReady -> no new routes",
		"k8s: pod Ready again -> first route", "health: /health fails -> no new routes", "health: /health ok again -> first route",
		"busy: waiting over threshold -> no new routes", "busy: waiting back under -> first route"} {
		d := results[name]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		p := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))+0.999)-1)] }
		r := func(d time.Duration) time.Duration {
			if d < 10*time.Millisecond {
				return d.Round(10 * time.Microsecond)
			}
			return d.Round(time.Millisecond)
		}
		fmt.Printf("  %-48s %9v %9v %9v\n", name, r(p(0.5)), r(p(0.99)), r(d[len(d)-1]))
	}
}

// flip probes until the engine's routability is want and returns how long
// it took.
func flip(t *testing.T, base string, id uint64, want bool, start time.Time) time.Duration {
	t.Helper()
	deadline := start.Add(time.Minute)
	for time.Now().Before(deadline) {
		code, _ := routeTo(t, base, id)
		if (code == http.StatusOK) == want {
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("engine %d never became routable=%v", id, want)
	return 0
}

func measureDNS(t *testing.T, trials int, interval time.Duration, out map[string][]time.Duration) {
	dns := dnstest.Start(t)
	fleet := newPlainFleet(t)
	base := "127.0.0.2"
	fleet.start(base, mockengine.MetricsVLLM)
	dns.SetIPs("engines.test", base)
	rep := StartReplica(t, func(c *config.Config) {
		c.Discover = []string{fleet.uri("engines.test.", dns.Addr())}
		c.DiscoverInterval = interval
	})
	url := BaseURL(rep)
	flip(t, url, fleet.id(base), true, time.Now())
	for i := range trials {
		ip := fmt.Sprintf("127.0.1.%d", 10+i)
		fleet.start(ip, mockengine.MetricsVLLM)
		time.Sleep(time.Duration(rand.Int64N(int64(interval)))) // any phase of the resolver's cycle
		dns.SetIPs("engines.test", base, ip)
		out["dns: record added -> first route"] = append(out["dns: record added -> first route"], flip(t, url, fleet.id(ip), true, time.Now()))
		time.Sleep(time.Duration(rand.Int64N(int64(interval))))
		dns.SetIPs("engines.test", base)
		out["dns: record removed -> no new routes"] = append(out["dns: record removed -> no new routes"], flip(t, url, fleet.id(ip), false, time.Now()))
	}
	// Health and load, polled every engine-poll-interval (default 1 s).
	e := fleet.engines[base]
	id := fleet.id(base)
	for range trials {
		time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
		e.srv.SetHealthy(false)
		out["health: /health fails -> no new routes"] = append(out["health: /health fails -> no new routes"], flip(t, url, id, false, time.Now()))
		e.srv.SetHealthy(true)
		out["health: /health ok again -> first route"] = append(out["health: /health ok again -> first route"], flip(t, url, id, true, time.Now()))
		time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
		e.srv.SetExtraWaiting(10 * config.DefaultEngineWaitingThreshold)
		out["busy: waiting over threshold -> no new routes"] = append(out["busy: waiting over threshold -> no new routes"], flip(t, url, id, false, time.Now()))
		e.srv.SetExtraWaiting(0)
		out["busy: waiting back under -> first route"] = append(out["busy: waiting back under -> first route"], flip(t, url, id, true, time.Now()))
	}
}

func measureKube(t *testing.T, trials int, out map[string][]time.Duration) {
	fleet := newPlainFleet(t)
	client := fake.NewClientset()
	allowAllReviews(client)
	rep := StartReplica(t, func(c *config.Config) {
		c.Discover = []string{fmt.Sprintf("k8s://inference?selector=app%%3Dvllm&port=%d&kv-events-port=%d&replay-port=%d",
			fleet.httpPort, fleet.zmq, fleet.replay)}
		c.KubeClients = &discovery.KubeClients{Core: client}
	})
	url := BaseURL(rep)
	pods := client.CoreV1().Pods("inference")
	ctx := context.Background()
	for i := range trials {
		ip := fmt.Sprintf("127.0.2.%d", 10+i)
		fleet.start(ip, mockengine.MetricsVLLM)
		name := fmt.Sprintf("vllm-%d", i)
		uid := types.UID(fmt.Sprintf("uid-%d-%d", i, time.Now().UnixNano()))
		id := uint64(discovery.WorkerID("k8s-pod/" + string(uid)))
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "inference", UID: uid, Labels: map[string]string{"app": "vllm"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
		time.Sleep(time.Duration(rand.Int64N(int64(200 * time.Millisecond))))
		start := time.Now()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out["k8s: Ready pod created -> first route"] = append(out["k8s: Ready pod created -> first route"], flip(t, url, id, true, start))
		p.Status.Conditions[0].Status = corev1.ConditionFalse
		start = time.Now()
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out["k8s: pod NotReady -> no new routes"] = append(out["k8s: pod NotReady -> no new routes"], flip(t, url, id, false, start))
		p.Status.Conditions[0].Status = corev1.ConditionTrue
		start = time.Now()
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out["k8s: pod Ready again -> first route"] = append(out["k8s: pod Ready again -> first route"], flip(t, url, id, true, start))
		start = time.Now()
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		out["k8s: pod deleted -> no new routes"] = append(out["k8s: pod deleted -> no new routes"], flip(t, url, id, false, start))
	}
}
