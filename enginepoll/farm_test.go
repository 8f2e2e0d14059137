package enginepoll

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// vllmLikePage is a /metrics page the size and shape of a vLLM server's
// (one model): the load gauges among counters and a dozen histograms of
// 20-odd buckets, about 40 KB.
func vllmLikePage(waiting int) []byte {
	var b strings.Builder
	b.WriteString("# HELP python_gc_objects_collected_total Objects collected during gc\n# TYPE python_gc_objects_collected_total counter\n")
	for g := range 3 {
		fmt.Fprintf(&b, "python_gc_objects_collected_total{generation=\"%d\"} %d.0\n", g, 1000+g)
	}
	for _, g := range []struct{ name, v string }{
		{"vllm:num_requests_running", "17.0"}, {"vllm:num_requests_waiting", strconv.Itoa(waiting) + ".0"},
		{"vllm:kv_cache_usage_perc", "0.63"}, {"vllm:num_preemptions_total", "3.0"},
	} {
		fmt.Fprintf(&b, "# HELP %s x\n# TYPE %s gauge\n%s{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} %s\n", g.name, g.name, g.name, g.v)
	}
	for _, h := range []string{"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
		"request_queue_time_seconds", "request_inference_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds",
		"request_prompt_tokens", "request_generation_tokens", "iteration_tokens_total", "request_max_num_generation_tokens",
		"request_params_max_tokens"} {
		name := "vllm:" + h
		fmt.Fprintf(&b, "# HELP %s Histogram of %s.\n# TYPE %s histogram\n", name, h, name)
		for i := range 24 {
			fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"%g\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} %d.0\n", name, 0.001*float64(int(1)<<i), i*37)
		}
		fmt.Fprintf(&b, "%s_bucket{engine=\"0\",le=\"+Inf\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 900.0\n", name)
		fmt.Fprintf(&b, "%s_count{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 900.0\n", name)
		fmt.Fprintf(&b, "%s_sum{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1234.5\n", name)
	}
	return []byte(b.String())
}

// TestFarmProcess is the fake engine farm when run as a child process
// (ENGINEPOLL_FARM=N): N engines on loopback, each its own listener,
// serving /health and a vLLM-sized /metrics. It prints the first port and
// serves until killed.
func TestFarmProcess(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ENGINEPOLL_FARM"))
	if n == 0 {
		t.Skip("the farm runs as a child of TestPollingCost")
	}
	page := vllmLikePage(5)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(page)
	})
	var ports []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
		go func() { _ = http.Serve(ln, mux) }()
	}
	fmt.Println("PORTS", strings.Join(ports, ","))
	select {}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestPollingCost measures what polling a fleet costs one replica: N fake
// engines (ENGINEPOLL_COST=N, e.g. 1000) in a child process on loopback,
// polled at the default interval (1 s) for ENGINEPOLL_SECONDS (30) after
// a warm-up; it reports the poller's CPU (cores) and the memory it adds.
//
//	ENGINEPOLL_COST=1000 go test -run TestPollingCost -v ./enginepoll/
func TestPollingCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ENGINEPOLL_COST"))
	if n == 0 {
		t.Skip("set ENGINEPOLL_COST=1000 to measure")
	}
	secs, _ := strconv.Atoi(os.Getenv("ENGINEPOLL_SECONDS"))
	if secs == 0 {
		secs = 30
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFarmProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "ENGINEPOLL_FARM="+strconv.Itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var ports []string
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PORTS "); ok {
			ports = strings.Split(rest, ",")
			break
		}
	}
	if len(ports) != n {
		t.Fatalf("farm gave %d ports", len(ports))
	}
	page := vllmLikePage(5)
	runtime.GC()
	rss0 := rssBytes()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)

	o := DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var targets []Target
	for i, port := range ports {
		targets = append(targets, Target{ID: kv.WorkerID(i + 1), URL: "http://127.0.0.1:" + port})
	}
	p.Set(targets)
	time.Sleep(5 * time.Second) // every engine polled a few times, connections open
	polls0, cpu0, wall0 := p.Stats().Polls, cpuTime(), time.Now()
	time.Sleep(time.Duration(secs) * time.Second)
	polls, cpu, wall := p.Stats().Polls-polls0, cpuTime()-cpu0, time.Since(wall0)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss := rssBytes()
	st := p.Stats()
	healthy := 0
	for _, e := range p.States() {
		if e.Healthy && e.MetricsError == "" && len(e.Ranks) == 1 {
			healthy++
		}
	}
	fmt.Printf("polling %d engines every %v (±10%%), /metrics page %d B, %v window:\n", n, o.Interval, len(page), wall.Round(time.Second))
	fmt.Printf("  polls/s %.0f (each /health + /metrics), engines read fine %d/%d, metrics errors %v\n",
		float64(polls)/wall.Seconds(), healthy, n, st.MetricsErrors)
	fmt.Printf("  CPU %.3f cores (%.1f µs per engine poll)\n", cpu.Seconds()/wall.Seconds(), float64(cpu.Microseconds())/float64(polls))
	fmt.Printf("  memory: RSS +%.1f MiB (%.0f KiB per engine), Go heap in use +%.1f MiB, goroutines %d\n",
		float64(rss-rss0)/(1<<20), float64(rss-rss0)/1024/float64(n), float64(ms.HeapInuse-ms0.HeapInuse)/(1<<20), runtime.NumGoroutine())
	if healthy != n {
		t.Errorf("%d of %d engines read fine", healthy, n)
	}
}
