package replica

import (
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/kvrouter/kvrouter/config"
)

func TestParseCgroupLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"max\n":                 0,
		"2147483648\n":          2 << 30,
		"9223372036854771712\n": 0, // cgroup v1's unlimited
		"garbage":               0,
		"-1":                    0,
		"":                      0,
	} {
		if got := parseCgroupLimit(in); got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

// TuneRuntime sets the GC target and the memory limit from the config,
// takes auto from the cgroup, and leaves both alone when Go's own
// environment variables are set.
func TestTuneRuntime(t *testing.T) {
	origGC := debug.SetGCPercent(100)
	origLimit := debug.SetMemoryLimit(math.MaxInt64)
	origProcs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { debug.SetGCPercent(origGC); debug.SetMemoryLimit(origLimit); runtime.GOMAXPROCS(origProcs) })
	noEnv := func(string) string { return "" }
	cgroup := func(path string) ([]byte, error) {
		if path == "/sys/fs/cgroup/memory.max" {
			return []byte("10737418240\n"), nil
		}
		return nil, errors.New("no such file")
	}
	cfg := config.Default()
	cfg.GCPercent, cfg.MemoryLimit = 300, "auto"
	s, err := tuneRuntime(cfg, noEnv, cgroup, nil)
	if err != nil || s.GCPercent != 300 || s.MemoryLimit != 9<<30 {
		t.Fatalf("auto in a 10 GiB container: %+v %v", s, err)
	}
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("GC percent %d, want 300", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 9<<30 {
		t.Errorf("memory limit %d, want 9 GiB", got)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	none := func(string) ([]byte, error) { return []byte("max\n"), nil }
	if s, err := tuneRuntime(cfg, noEnv, none, nil); err != nil || s.MemoryLimit != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("auto without a container limit set a limit: %+v %v", s, err)
	}
	cfg.MemoryLimit = "2GiB"
	if s, err := tuneRuntime(cfg, noEnv, none, nil); err != nil || s.MemoryLimit != 2<<30 || debug.SetMemoryLimit(-1) != 2<<30 {
		t.Errorf("explicit 2GiB: %+v %v", s, err)
	}

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	goEnv := func(k string) string {
		if k == "GOGC" || k == "GOMEMLIMIT" || k == "GOMAXPROCS" {
			return "set"
		}
		return ""
	}
	if s, err := tuneRuntime(cfg, goEnv, cgroup, nil); err != nil || s != (RuntimeSettings{}) {
		t.Errorf("GOGC, GOMEMLIMIT and GOMAXPROCS set: applied %+v %v", s, err)
	}
	if debug.SetGCPercent(100) != 100 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Error("the flags overrode Go's environment")
	}
}

// procs-per-cpu multiplies Go's default GOMAXPROCS (rounded up), never
// compounds over calls, and yields to GOMAXPROCS in the environment.
func TestTuneRuntimeProcs(t *testing.T) {
	origProcs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(origProcs) })
	for _, tc := range []struct {
		perCPU float64
		cpus   int
		want   int
	}{{1, 4, 4}, {2, 2, 4}, {1.5, 3, 5}, {0.5, 4, 4}, {2, 1, 2}} {
		if got := procsFor(tc.perCPU, tc.cpus); got != tc.want {
			t.Errorf("procsFor(%v, %d) = %d, want %d", tc.perCPU, tc.cpus, got, tc.want)
		}
	}
	noEnv := func(string) string { return "" }
	none := func(string) ([]byte, error) { return nil, errors.New("no cgroup") }
	cfg := config.Default()
	cfg.GCPercent, cfg.MemoryLimit, cfg.ProcsPerCPU = 0, "none", 2
	want := 2 * defaultProcs
	for range 2 { // the second call must not double it again
		s, err := tuneRuntime(cfg, noEnv, none, nil)
		if err != nil || s.GOMAXPROCS != want || runtime.GOMAXPROCS(0) != want {
			t.Fatalf("procs-per-cpu 2 on %d CPUs: applied %+v (%v), GOMAXPROCS %d, want %d", defaultProcs, s, err, runtime.GOMAXPROCS(0), want)
		}
	}
	runtime.GOMAXPROCS(defaultProcs)
	cfg.ProcsPerCPU = 1
	if s, _ := tuneRuntime(cfg, noEnv, none, nil); s.GOMAXPROCS != 0 || runtime.GOMAXPROCS(0) != defaultProcs {
		t.Fatalf("procs-per-cpu 1 changed GOMAXPROCS: %+v, now %d", s, runtime.GOMAXPROCS(0))
	}
	cfg.ProcsPerCPU = 2
	env := func(k string) string {
		if k == "GOMAXPROCS" {
			return "3"
		}
		return ""
	}
	if s, _ := tuneRuntime(cfg, env, none, nil); s.GOMAXPROCS != 0 || runtime.GOMAXPROCS(0) != defaultProcs {
		t.Fatalf("GOMAXPROCS in the environment was overridden: %+v, now %d", s, runtime.GOMAXPROCS(0))
	}
}
