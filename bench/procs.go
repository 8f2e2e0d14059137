package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ProcessOptions starts one router replica as a child process.
type ProcessOptions struct {
	// Command is the argv prefix that runs replica.Serve, for example
	// {"/usr/bin/kvrouter", "serve"} or a binary re-executing itself.
	Command []string
	// Args are `kvrouter serve` flags; HTTPAddr must match --http-addr.
	Args     []string
	HTTPAddr string
	// Env is added to the parent's environment.
	Env []string
	// CPU caps the replica at this many cores in its own cgroup (0 = no
	// cap). GOMAXPROCS is set to match, as on a machine of that size.
	CPU     float64
	LogPath string
}

// groupSeq numbers the CPU groups this process creates.
var groupSeq atomic.Uint64

// ReplicaProcess is a router replica running as a child process.
type ReplicaProcess struct {
	Name    string
	BaseURL string
	// EPPAddr is the endpoint picker's address ("" without one).
	EPPAddr string
	// GRPCAddr is the gRPC API's address ("" without one).
	GRPCAddr string
	cmd      *exec.Cmd
	group    *CPUGroup
	logFile  *os.File
	logPath  string
	exited   chan struct{}
}

// ErrPortTaken: a child exited because one of its ports was taken between
// the moment it was found free and the child's bind (another process on a
// busy machine); starting again on new ports is the cure.
var ErrPortTaken = errors.New("port taken")

// logTail is the end of the child's log, for errors.
func (p *ReplicaProcess) logTail() string {
	if p.logPath == "" {
		return ""
	}
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(len(lines)-5, 0):], "\n")
}

// StartReplicaProcess starts a child replica; it does not wait for it to
// be ready (see WaitReady).
func StartReplicaProcess(name string, o ProcessOptions) (*ReplicaProcess, error) {
	if len(o.Command) == 0 || o.HTTPAddr == "" {
		return nil, fmt.Errorf("replica %s: command and HTTP address are required", name)
	}
	p := &ReplicaProcess{Name: name, BaseURL: "http://" + o.HTTPAddr, exited: make(chan struct{}), logPath: o.LogPath}
	if o.CPU > 0 {
		// One group per process, even when two clusters name replicas alike.
		g, err := NewCPUGroup(fmt.Sprintf("kvbench-%d-%d-%s", os.Getpid(), groupSeq.Add(1), name), o.CPU)
		if err != nil {
			return nil, err
		}
		p.group = g
	}
	cmd := exec.Command(o.Command[0], append(append([]string(nil), o.Command[1:]...), o.Args...)...)
	cmd.Env = append(os.Environ(), o.Env...)
	if o.CPU > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(int(math.Ceil(o.CPU))))
	}
	if o.LogPath != "" {
		f, err := os.Create(o.LogPath)
		if err != nil {
			p.cleanupGroup()
			return nil, fmt.Errorf("replica %s: log: %w", name, err)
		}
		p.logFile = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		p.closeLog()
		p.cleanupGroup()
		return nil, fmt.Errorf("replica %s: start: %w", name, err)
	}
	p.cmd = cmd
	if p.group != nil {
		if err := p.group.Add(cmd.Process.Pid); err != nil {
			_ = p.Kill()
			return nil, err
		}
	}
	go func() {
		_ = cmd.Wait()
		p.closeLog()
		p.cleanupGroup()
		close(p.exited)
	}()
	return p, nil
}

// Pid of the child.
func (p *ReplicaProcess) Pid() int { return p.cmd.Process.Pid }

// WaitReady polls /readyz until it answers 200, the child exits or ctx
// ends.
func (p *ReplicaProcess) WaitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(p.BaseURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			tail := p.logTail()
			err := fmt.Errorf("replica %s exited before it was ready: %v; log:\n%s", p.Name, p.cmd.ProcessState, tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", ErrPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("replica %s not ready: %w", p.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL (a crash: no drain, no cluster leave) and waits for
// the process to be gone.
func (p *ReplicaProcess) Kill() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("replica %s: kill: %w", p.Name, err)
	}
	<-p.exited
	return nil
}

// Pause freezes the process (SIGSTOP): it neither sends nor answers
// anything, as if cut off by a network partition, until Resume.
func (p *ReplicaProcess) Pause() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("replica %s: pause: %w", p.Name, err)
	}
	return nil
}

// Resume continues a paused process (SIGCONT).
func (p *ReplicaProcess) Resume() error {
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("replica %s: resume: %w", p.Name, err)
	}
	return nil
}

// Stop sends SIGTERM (graceful shutdown) and waits; past ctx it kills.
func (p *ReplicaProcess) Stop(ctx context.Context) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("replica %s: stop: %w", p.Name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		return p.Kill()
	}
}

// CPUTime is the user+system CPU the running child has used so far.
func (p *ReplicaProcess) CPUTime() (time.Duration, error) {
	return ProcessCPUTime(p.Pid())
}

func (p *ReplicaProcess) closeLog() {
	if p.logFile != nil {
		_ = p.logFile.Close()
	}
}

func (p *ReplicaProcess) cleanupGroup() {
	if p.group != nil {
		_ = p.group.Remove()
	}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcessCPUTime reads a live process's user+system CPU time from
// /proc/<pid>/stat (10 ms resolution).
func ProcessCPUTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	// The command name (field 2) may contain spaces; fields after its
	// closing parenthesis are fixed: utime and stime are the 12th and 13th.
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("cpu time of %d: malformed stat %q", pid, s)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of %d: short stat %q", pid, s)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// FreeLoopbackPort returns a loopback port free for TCP and UDP at the
// time of the call (memberlist binds both on the same port).
func FreeLoopbackPort() (int, error) {
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		udp, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err != nil {
			continue
		}
		udp.Close()
		return port, nil
	}
	return 0, errors.New("free port: no port free for both TCP and UDP")
}
