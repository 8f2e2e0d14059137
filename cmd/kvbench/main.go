// Command kvbench benchmarks routing policies against an in-process fleet
// of mock engines (run, demo), the router's indexer alone (indexer), the
// scaling of replica processes (scale) and the HTTP routing path under an
// open-loop load (http).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/version"
	"github.com/kvrouter/kvrouter/replica"
)

const usage = `usage: kvbench <command> [flags]

commands:
  run      sweep policies x QPS points over an embedded fleet (NATS, router, mock workers)
  demo     the README preset: 8 mock workers, a short shared-prefix sweep, out/demo/
  b2b      llm-d's B2B shape (150 customers x 6,000-token contexts, 5 users, 1,200-token questions) scaled to this machine, out/b2b/
  table    one table of several runs' report.json files (the cost comparison of make cost-table)
  indexer  replay the Mooncake trace as KV events against an in-process router (--event-rate: paced, lookup latency per rate)
  scale    routing decisions/s of 1 vs N replica processes, each on its own CPU quota
  load     send a workload to a running router or load balancer (completions)
  http     open-loop /route load at fixed rates (in-process router or --url): decisions/s and latency percentiles

kvbench <command> -h lists a command's flags; kvbench --version prints the version.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if code := exitCode(err); code != 0 {
		fmt.Fprintln(os.Stderr, "kvbench:", err)
		os.Exit(code)
	}
}

// exitCode is 0 for success and for -h/--help (the help asked for is not
// a failure), 1 for any other error.
func exitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "run":
		return runSweep(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "b2b":
		return runB2B(ctx, args[1:], stdout, stderr)
	case "table":
		return runTable(args[1:], stdout, stderr)
	case "indexer":
		return runIndexer(ctx, args[1:], stdout, stderr)
	case "scale":
		return runScale(ctx, args[1:], stdout, stderr)
	case "load":
		return runLoad(ctx, args[1:], stdout, stderr)
	case "http":
		return runHTTP(ctx, args[1:], stdout, stderr)
	case replicaCommand:
		return runReplica(ctx, args[1:], stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version", "-version":
		_, err := fmt.Fprintln(stdout, "kvbench", version.Get())
		return err
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// tuneAsServed gives the in-process routers of a fleet run kvrouter
// serve's default runtime settings (GC target, memory limit), so a run
// measures the router as it is served; GOGC and GOMEMLIMIT still win.
func tuneAsServed() error {
	_, err := replica.TuneRuntime(config.Default(), os.Getenv, nil)
	return err
}
