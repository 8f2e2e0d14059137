package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MemoryLimitAuto and MemoryLimitNone are memory-limit's two words.
const (
	MemoryLimitAuto = "auto"
	MemoryLimitNone = "none"
)

// AutoMemoryLimitShare is the part of a container's memory limit that
// memory-limit=auto gives the Go heap: the rest is for goroutine stacks,
// the runtime's own overhead and the kernel's page cache of the process.
const AutoMemoryLimitShare = 0.9

// ParseMemoryLimit reads memory-limit. auto reports auto=true (the
// caller knows the container's limit); none and "" are no limit (0).
func ParseMemoryLimit(s string) (bytes int64, auto bool, err error) {
	v := strings.TrimSpace(s)
	switch strings.ToLower(v) {
	case MemoryLimitAuto:
		return 0, true, nil
	case MemoryLimitNone, "":
		return 0, false, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, false, fmt.Errorf("memory-limit %q: want auto, none, or a positive byte count with an optional KiB/MiB/GiB/TiB suffix", s)
	}
	return n * mult, false, nil
}

// AutoMemoryLimit is memory-limit=auto's value for a container limit
// read from the cgroup: AutoMemoryLimitShare of it, or 0 (no limit) when
// there is none.
func AutoMemoryLimit(containerLimit int64) int64 {
	if containerLimit <= 0 {
		return 0
	}
	return int64(float64(containerLimit) * AutoMemoryLimitShare)
}
