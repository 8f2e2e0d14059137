// Package natsbus is the router's NATS edge: an embedded NATS server for
// single-machine setups, connections that reconnect forever, the two
// ingestion sources — KV events (with JetStream replay for late
// replicas) and worker heartbeats — the engines' publisher, and index
// snapshots in a JetStream object store.
package natsbus

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultListen is where an embedded server listens unless told: local
// only, on a free port.
const DefaultListen = "127.0.0.1:0"

// readyTimeout bounds how long StartEmbedded waits for the server.
const readyTimeout = 10 * time.Second

// ErrNoStoreDir means JetStream was asked for without a directory to
// keep its streams in.
var ErrNoStoreDir = errors.New("embedded NATS: JetStream needs a StoreDir")

// EmbeddedConfig configures an in-process NATS server.
type EmbeddedConfig struct {
	// Listen is host:port; empty means DefaultListen, and port 0 or -1
	// picks a free port (see ClientURL).
	Listen string
	// StoreDir holds JetStream's file store (in a "jetstream"
	// subdirectory); required with JetStream.
	StoreDir string
	// JetStream enables streams (KV-event replay, snapshots).
	JetStream bool
	// Debug turns the server's own logging on; otherwise it logs nothing.
	Debug bool
}

// Embedded is a running in-process NATS server.
type Embedded struct{ srv *server.Server }

// StartEmbedded starts a server and waits until it accepts clients. The
// server never installs signal handlers: the process owning it decides
// when to stop.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS listen %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("embedded NATS listen %q: bad port %q", cfg.Listen, portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if cfg.JetStream && cfg.StoreDir == "" {
		return nil, ErrNoStoreDir
	}
	opts := &server.Options{
		Host: host, Port: port, NoLog: !cfg.Debug, NoSigs: true,
		JetStream: cfg.JetStream, StoreDir: filepath.Join(cfg.StoreDir, "jetstream"),
		MaxPayload: 8 << 20, // protobuf batches and snapshots of big fleets
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("create embedded NATS: %w", err)
	}
	if cfg.Debug {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS on %s did not become ready within %s", cfg.Listen, readyTimeout)
	}
	return &Embedded{srv: srv}, nil
}

// ClientURL is the URL clients connect to (with the real port when a
// free one was picked).
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
