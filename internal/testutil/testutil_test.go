package testutil

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure instead of
// stopping the goroutine, so the helpers' failure paths can be checked.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	fatals []string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
}

func (r *recorder) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.fatals...)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	rec := &recorder{TB: t}
	calls := 0
	d := Eventually(rec, time.Second, "third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
	if f := rec.failures(); len(f) != 0 {
		t.Fatalf("failed: %v", f)
	}
	if d <= 0 || d >= time.Second {
		t.Fatalf("elapsed %v, want between 0 and the timeout", d)
	}
}

func TestEventuallyChecksOnceWhenTheConditionAlreadyHolds(t *testing.T) {
	calls := 0
	Eventually(t, time.Second, "true", func() bool { calls++; return true })
	if calls != 1 {
		t.Fatalf("cond called %d times, want 1", calls)
	}
}

func TestEventuallyFailsAfterTimeout(t *testing.T) {
	rec := &recorder{TB: t}
	const timeout = 30 * time.Millisecond
	calls := 0
	d := Eventually(rec, timeout, "never", func() bool { calls++; return false })
	f := rec.failures()
	if len(f) != 1 || !strings.Contains(f[0], "waiting for never") || !strings.Contains(f[0], timeout.String()) {
		t.Fatalf("failures %q, want one naming the condition and the timeout", f)
	}
	if d < timeout {
		t.Fatalf("gave up after %v, before the %v timeout", d, timeout)
	}
	// 1+2+4+8+10+... ms: a handful of polls, not a spin.
	if calls < 3 || calls > 20 {
		t.Fatalf("cond called %d times in %v", calls, d)
	}
}

func TestEventuallyNilReportsTheLastError(t *testing.T) {
	rec := &recorder{TB: t}
	calls := 0
	EventuallyNil(rec, 20*time.Millisecond, func() error {
		calls++
		return fmt.Errorf("attempt %d", calls)
	})
	f := rec.failures()
	if len(f) != 1 || !strings.Contains(f[0], fmt.Sprintf("attempt %d", calls)) {
		t.Fatalf("failures %q after %d calls, want the last error", f, calls)
	}
}

func TestEventuallyNilSucceeds(t *testing.T) {
	rec := &recorder{TB: t}
	calls := 0
	EventuallyNil(rec, time.Second, func() error {
		if calls++; calls < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	if f := rec.failures(); len(f) != 0 || calls != 2 {
		t.Fatalf("failures %q, calls %d", f, calls)
	}
}

func TestFreePortCanBeBound(t *testing.T) {
	a := FreePort(t)
	if a <= 0 || a > 65535 {
		t.Fatalf("port %d", a)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", a))
	if err != nil {
		t.Fatalf("bind the free port: %v", err)
	}
	ln.Close()
}

func TestFreeAddrHasNoListener(t *testing.T) {
	addr := FreeAddr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("addr %q", addr)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("something listens on %s", addr)
	}
}
