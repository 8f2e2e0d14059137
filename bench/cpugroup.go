package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPUGroup is a Linux cgroup that caps the CPU of the processes put in it:
// the bench harness gives each router replica its own share of a core, so
// that N replicas on a small machine behave like N replicas on N machines
// as far as CPU goes. It uses cgroup v2's cpu.max where the cpu controller
// is on the unified hierarchy and v1's CFS quota otherwise.
type CPUGroup struct {
	dir   string
	cores float64
}

// cfsPeriod is the CFS accounting period (µs) both cgroup versions use.
const cfsPeriod = 100000

// NewCPUGroup creates the cgroup name capped at cores CPUs. It needs root
// and a writable cgroup filesystem; the error says which is missing.
func NewCPUGroup(name string, cores float64) (*CPUGroup, error) {
	if cores <= 0 {
		return nil, fmt.Errorf("cpu group %s: cores must be positive, got %v", name, cores)
	}
	quota := int(cores * cfsPeriod)
	if v2root, ok := cgroupV2CPURoot(); ok {
		dir := filepath.Join(v2root, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cpu group %s: %w", name, err)
		}
		if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, cfsPeriod)); err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("cpu group %s: %w", name, err)
		}
		return &CPUGroup{dir: dir, cores: cores}, nil
	}
	const v1root = "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(v1root, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("cpu group %s: no cgroup cpu controller (v2 cpu.max or v1 %s): %w", name, v1root, err)
	}
	dir := filepath.Join(v1root, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cpu group %s: %w", name, err)
	}
	if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriod)); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("cpu group %s: %w", name, err)
	}
	if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.Itoa(quota)); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("cpu group %s: %w", name, err)
	}
	return &CPUGroup{dir: dir, cores: cores}, nil
}

// cgroupV2CPURoot reports the unified hierarchy's root when its cpu
// controller is available to child groups.
func cgroupV2CPURoot() (string, bool) {
	const root = "/sys/fs/cgroup"
	ctl, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil {
		return "", false
	}
	for _, c := range strings.Fields(string(ctl)) {
		if c == "cpu" {
			return root, true
		}
	}
	return "", false
}

// Cores is the cap.
func (g *CPUGroup) Cores() float64 { return g.cores }

// Add moves a process (all its threads) into the group.
func (g *CPUGroup) Add(pid int) error {
	if err := writeFile(filepath.Join(g.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("cpu group %s: add pid %d: %w", filepath.Base(g.dir), pid, err)
	}
	return nil
}

// Remove deletes the group; its processes must have exited.
func (g *CPUGroup) Remove() error {
	if err := os.Remove(g.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cpu group %s: %w", filepath.Base(g.dir), err)
	}
	return nil
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
