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
	"os"
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

// ErrStoreDirInUse means another embedded server (this process or
// another) holds the JetStream store directory.
var ErrStoreDirInUse = errors.New("embedded NATS: the JetStream store directory is in use by another server (give each embedded NATS its own --data-dir)")

// lockFile, in StoreDir, is what an embedded server with JetStream locks.
const lockFile = "kvrouter.lock"

// EmbeddedConfig configures an in-process NATS server.
type EmbeddedConfig struct {
	// Listen is host:port; empty means DefaultListen, and port 0 or -1
	// picks a free port (see ClientURL).
	Listen string
	// StoreDir holds JetStream's file store (in a "jetstream"
	// subdirectory); required with JetStream. It must be the same path on
	// every start for the streams (KV events, index snapshots) to survive
	// a restart, and only one server may use it at a time: it is locked
	// while the server runs (ErrStoreDirInUse).
	StoreDir string
	// JetStream enables streams (KV-event replay, snapshots).
	JetStream bool
	// Debug turns the server's own logging on; otherwise it logs nothing.
	Debug bool
}

// Embedded is a running in-process NATS server.
type Embedded struct {
	srv  *server.Server
	lock *os.File // StoreDir's lock (nil without JetStream)
}

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
	e := &Embedded{}
	if cfg.JetStream {
		if e.lock, err = lockDir(cfg.StoreDir); err != nil {
			return nil, err
		}
	}
	ok := false
	defer func() {
		if !ok {
			e.unlock()
		}
	}()
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
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS on %s did not become ready within %s", cfg.Listen, readyTimeout)
	}
	e.srv, ok = srv, true
	return e, nil
}

func (e *Embedded) unlock() {
	if e.lock != nil {
		_ = e.lock.Close() // closing drops the flock; nothing else to report
		e.lock = nil
	}
}

// ClientURL is the URL clients connect to (with the real port when a
// free one was picked).
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.unlock()
}
