package test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/replica"
)

// childReplicaEnv makes the test binary run as a router replica process
// (exactly `kvrouter serve` with os.Args as its flags) instead of running
// tests: the multi-process tests start their replicas this way, so a
// `kill -9` kills a real, separate process with the shipped code path.
const childReplicaEnv = "KVROUTER_TEST_CHILD_REPLICA"

func TestMain(m *testing.M) {
	if os.Getenv(childReplicaEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := replica.Serve(ctx, os.Args[1:], os.Getenv, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "child replica:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startProcessCluster starts n replicas as processes of this test binary
// on loopback, with fast failure detection and the given extra flags, and
// stops them when the test ends.
func startProcessCluster(t *testing.T, n int, args ...string) *bench.ProcessCluster {
	t.Helper()
	return startProcessClusterWith(t, bench.ProcessClusterOptions{Replicas: n, Args: args})
}

// startProcessClusterWith is startProcessCluster with more options
// (Command, Env, Fast and Dir are set here).
func startProcessClusterWith(t *testing.T, opts bench.ProcessClusterOptions) *bench.ProcessCluster {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("own executable: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.Command, opts.Env, opts.Fast, opts.Dir = []string{exe}, []string{childReplicaEnv + "=1"}, true, t.TempDir()
	c, err := bench.StartProcessCluster(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}
