// Package natsbus is the router's NATS edge: an embedded NATS server for
// single-machine setups, connections that reconnect forever, and the two
// ingestion sources — KV events (with JetStream replay for late replicas)
// and worker heartbeats.
package natsbus

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures an in-process NATS server.
type EmbeddedConfig struct {
	// Listen is host:port; port 0 picks a free port.
	Listen string
	// StoreDir holds JetStream's file store.
	StoreDir string
	// JetStream enables streams (KV-event replay).
	JetStream bool
	// Debug turns the server's own logging on.
	Debug bool
}

// Embedded is a running in-process NATS server.
type Embedded struct{ srv *server.Server }

// StartEmbedded starts a server and waits until it accepts clients.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS listen %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS port %q: %w", portStr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		Host: host, Port: port, NoLog: !cfg.Debug, NoSigs: true,
		JetStream: cfg.JetStream, StoreDir: filepath.Join(cfg.StoreDir, "jetstream"),
		MaxPayload: 8 << 20,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("create embedded NATS: %w", err)
	}
	if cfg.Debug {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS on %s did not become ready", cfg.Listen)
	}
	return &Embedded{srv: srv}, nil
}

// ClientURL is the URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
