package replica

import (
	"errors"
	"math"
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
	t.Cleanup(func() { debug.SetGCPercent(origGC); debug.SetMemoryLimit(origLimit) })
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
		if k == "GOGC" || k == "GOMEMLIMIT" {
			return "set"
		}
		return ""
	}
	if s, err := tuneRuntime(cfg, goEnv, cgroup, nil); err != nil || s != (RuntimeSettings{}) {
		t.Errorf("GOGC and GOMEMLIMIT set: applied %+v %v", s, err)
	}
	if debug.SetGCPercent(100) != 100 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Error("the flags overrode Go's environment")
	}
}
