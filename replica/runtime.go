package replica

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/config"
)

// RuntimeSettings is what TuneRuntime applied (0 = left as it was).
type RuntimeSettings struct {
	GCPercent   int
	MemoryLimit int64
	GOMAXPROCS  int
}

// defaultProcs is Go's GOMAXPROCS before TuneRuntime changed it: the CPUs
// this process may use (the container's CPU limit, since Go 1.25), or
// GOMAXPROCS from the environment. Read once, so a second TuneRuntime in
// one process does not multiply it again.
var defaultProcs = runtime.GOMAXPROCS(0)

// TuneRuntime applies the process-wide runtime knobs of cfg: GOMAXPROCS
// (procs-per-cpu), the GC target and the soft memory limit. Go's own
// GOMAXPROCS, GOGC and GOMEMLIMIT, when set, win over the flags. The
// router's live heap is mostly the index, a pointer-rich structure every
// GC cycle marks in full; at Go's default
// target a busy router spends its cores marking it and lookups wait
// behind the marking (docs/benchmarks.md, "Index and KV-event ingest"), so the
// default target is higher, and the memory limit is the safety net that
// makes the GC collect sooner when a container's memory runs short.
// Everything in one process shares these: kvbench applies them once for
// the in-process router it measures, as serve does.
func TuneRuntime(cfg config.Config, getenv func(string) string, log *slog.Logger) (RuntimeSettings, error) {
	return tuneRuntime(cfg, getenv, os.ReadFile, log)
}

func tuneRuntime(cfg config.Config, getenv func(string) string, readFile func(string) ([]byte, error), log *slog.Logger) (RuntimeSettings, error) {
	var s RuntimeSettings
	if n := procsFor(cfg.ProcsPerCPU, defaultProcs); n != defaultProcs && getenv("GOMAXPROCS") == "" {
		// Setting it stops Go from following later changes of the
		// container's CPU limit; the pod restarts on a resize anyway.
		runtime.GOMAXPROCS(n)
		s.GOMAXPROCS = n
		if log != nil {
			log.Info("GOMAXPROCS from procs-per-cpu", "cpus", defaultProcs, "procs_per_cpu", cfg.ProcsPerCPU, "gomaxprocs", n)
		}
	}
	if cfg.GCPercent > 0 && getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
		s.GCPercent = cfg.GCPercent
	}
	if getenv("GOMEMLIMIT") != "" {
		return s, nil
	}
	limit, auto, err := config.ParseMemoryLimit(cfg.MemoryLimit)
	if err != nil {
		return s, fmt.Errorf("runtime settings: %w", err)
	}
	if auto {
		container := cgroupMemoryLimit(readFile)
		limit = config.AutoMemoryLimit(container)
		if limit > 0 && log != nil {
			log.Info("memory limit from the container", "container_bytes", container, "go_limit_bytes", limit)
		}
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		s.MemoryLimit = limit
	}
	return s, nil
}

// procsFor is GOMAXPROCS for perCPU processors per CPU on cpus CPUs,
// rounded up (perCPU below 1 counts as 1).
func procsFor(perCPU float64, cpus int) int {
	return int(math.Ceil(max(perCPU, 1) * float64(cpus)))
}

// cgroupMemoryLimit is the memory limit of this process's cgroup (v2,
// then v1), or 0 when there is none or it cannot be read.
func cgroupMemoryLimit(readFile func(string) ([]byte, error)) int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := readFile(path)
		if err != nil {
			continue
		}
		return parseCgroupLimit(string(data))
	}
	return 0
}

// noCgroupLimit is where cgroup v1 reports "unlimited" (a page-rounded
// 2^63-1); anything this large means no limit.
const noCgroupLimit = 1 << 60

func parseCgroupLimit(s string) int64 {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= noCgroupLimit {
		return 0
	}
	return n
}
