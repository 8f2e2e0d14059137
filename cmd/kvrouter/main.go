// Command kvrouter runs one KV-cache-aware router replica.
//
//	kvrouter serve [flags]   start a replica (serve -h lists every flag, grouped)
//	kvrouter version         print the version (also --version)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/internal/version"
	"github.com/kvrouter/kvrouter/replica"
)

const usage = `usage: kvrouter <command> [flags]

commands:
  serve     run one router replica (kvrouter serve -h lists its flags, grouped;
            --config FILE reads them from YAML)
  version   print the version, VCS revision and Go version (also --version)

Flags are also environment variables KVROUTER_<FLAG_NAME> (see docs/configuration.md).
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("missing command")
	}
	switch args[0] {
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return replica.Serve(ctx, args[1:], os.Getenv, stderr)
	case "version", "--version", "-version", "-v":
		_, err := fmt.Fprintln(stdout, "kvrouter", version.Get())
		return err
	case "help", "-h", "--help", "-help":
		_, err := fmt.Fprint(stdout, usage)
		return err
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
