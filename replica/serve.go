package replica

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/config"
)

// Serve runs one replica process from its command-line arguments and
// environment until ctx is cancelled, then shuts it down within the
// configured timeout. It is what `kvrouter serve` runs; the bench harness
// and the multi-process tests start their child replicas through it too,
// so what they kill with SIGKILL is exactly the shipped binary's code.
func Serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.LoadWithOutput(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, err := cfg.NewLogger(stderr)
	if err != nil {
		return err
	}
	if _, err := TuneRuntime(cfg, getenv, log); err != nil {
		return err
	}
	rep, err := Start(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("start replica: %w", err)
	}
	own := log.With("component", "replica", "replica", rep.ID())
	attrs := []any{"http", rep.HTTPAddr(), "nats", rep.NATSURL()}
	if a := rep.GRPCAddr(); a != "" {
		attrs = append(attrs, "grpc", a)
	}
	if a := rep.EPPAddr(); a != "" {
		attrs = append(attrs, "epp", a)
	}
	own.Info("kvrouter serving", attrs...)
	<-ctx.Done()
	own.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return rep.Shutdown(shutdownCtx)
}
