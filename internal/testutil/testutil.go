// Package testutil holds the helpers kvrouter's tests share: waiting for a
// condition and picking free loopback ports. It is imported by tests only.
package testutil

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// Poll intervals: a condition is checked at once, then after 1 ms, and
// the interval doubles up to MaxPollInterval, so a fast condition is seen
// quickly and a slow one does not spin.
const (
	MinPollInterval = time.Millisecond
	MaxPollInterval = 10 * time.Millisecond
)

// Eventually polls cond until it returns true and returns how long that
// took. If timeout passes first it fails the test with
// "timed out after <timeout> waiting for <what>".
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	interval := MinPollInterval
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
			return time.Since(start)
		}
		time.Sleep(interval)
		interval = min(2*interval, MaxPollInterval)
	}
	return time.Since(start)
}

// EventuallyNil polls cond until it returns nil and returns how long that
// took. If timeout passes first it fails the test with cond's last error.
func EventuallyNil(t testing.TB, timeout time.Duration, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	interval := MinPollInterval
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("condition not met within %v: %v", timeout, err)
			return time.Since(start)
		}
		time.Sleep(interval)
		interval = min(2*interval, MaxPollInterval)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago (another
// process may take it before the caller binds it).
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
		return 0
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatalf("free port: close listener: %v", err)
	}
	return port
}

// FreeAddr returns "127.0.0.1:<port>" for a port that was free a moment
// ago, such as an address nothing listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
