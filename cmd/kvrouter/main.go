// Command kvrouter runs one KV-cache-aware router replica.
//
//	kvrouter serve [flags]   start a replica (see -h for every flag)
//	kvrouter version         print the version
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/replica"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kvrouter serve [flags] | kvrouter version")
	}
	switch args[0] {
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return replica.Serve(ctx, args[1:], os.Getenv, os.Stderr)
	case "version":
		fmt.Println(replica.Version)
		return nil
	}
	return fmt.Errorf("unknown command %q (want serve or version)", args[0])
}
