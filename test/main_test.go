package test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

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

// childReplicaCommand is the argv prefix and environment that run a
// replica process from this test binary.
func childReplicaCommand(t testing.TB) ([]string, []string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("own executable: %v", err)
	}
	return []string{exe}, []string{childReplicaEnv + "=1"}
}
