// Package natsbus is the router's NATS edge: an embedded NATS server for
// single-machine setups, connections that reconnect forever, the two
// ingestion sources — KV events (with JetStream replay for late
// replicas) and worker heartbeats — the engines' publisher, and index
// snapshots in a JetStream object store.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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

	// Authentication. A server listening beyond loopback must make every
	// client authenticate (ErrInsecureListen) unless Insecure is set.
	// User/Password or NkeySeedFile (the public key of that user seed)
	// are the router's own credentials, added to the server's users
	// unless ConfigFile already lists that user or key; clients use the
	// same ones (or the ConfigFile's users).
	User, Password string
	NkeySeedFile   string
	// CredsFile is the router's .creds (operator JWT mode): the server
	// must trust its operator, so it needs a ConfigFile that says so.
	CredsFile string
	// ConfigFile is a nats-server configuration file (authorization
	// users with permissions, accounts, operator and resolver, tls, ...),
	// read first; Listen, StoreDir and JetStream override its listen and
	// jetstream settings, and the flags' user or key and TLS files are
	// added to it.
	ConfigFile string
	// TLSCert and TLSKey make the server require TLS, with this
	// certificate. (Client-certificate verification comes from
	// ConfigFile's tls block.)
	TLSCert, TLSKey string
	// Insecure lets the server listen beyond loopback with no
	// authentication: any client that reaches it can then publish KV
	// events and heartbeats and purge the streams.
	Insecure bool
}

// Embedded is a running in-process NATS server.
type Embedded struct {
	srv  *server.Server
	lock *os.File // StoreDir's lock (nil without JetStream)
	tls  bool     // clients must use TLS (over the network)
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
	opts, err := serverOptions(cfg, host, port)
	if err != nil {
		return nil, err
	}
	if err := listenable(opts.Host, opts.Port); err != nil {
		return nil, err
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
	e.srv, e.tls, ok = srv, opts.TLSConfig != nil, true
	return e, nil
}

// listenable fails fast, naming the address, when the embedded server could
// not listen there (another process holds the port): the server itself only
// logs that and leaves StartEmbedded waiting out readyTimeout.
func listenable(host string, port int) error {
	if port <= 0 {
		return nil // a random port: nothing to check
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("embedded NATS cannot listen on %s: %w", addr, err)
	}
	return ln.Close()
}

// InsecureListenError is ErrInsecureListen for addr, saying what is at
// stake and which flags fix it.
func InsecureListenError(addr string) error {
	return fmt.Errorf("%w: --nats-listen %s is reachable from other hosts, and without authentication any client "+
		"that reaches it could publish KV events, clear or fill any worker's index, register workers by heartbeat and "+
		"purge the streams. Give the router a user (--nats-user with --nats-password-file or KVROUTER_NATS_PASSWORD) "+
		"or an nkey (--nats-nkey seed file), or --nats-server-config with an authorization or accounts block; "+
		"or pass --nats-insecure to run it open anyway", ErrInsecureListen, addr)
}

// LoopbackListen reports whether a listen address (host:port) is
// reachable from this host only.
func LoopbackListen(listen string) bool {
	if listen == "" {
		listen = DefaultListen
	}
	host, _, err := net.SplitHostPort(listen)
	return err == nil && isLoopback(host)
}

// serverOptions builds the server's options: ConfigFile's, then ours,
// then the checks that it is not open to the network by mistake.
func serverOptions(cfg EmbeddedConfig, host string, port int) (*server.Options, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		fo, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS config %s: %w", cfg.ConfigFile, err)
		}
		opts = fo
	}
	opts.Host, opts.Port = host, port
	opts.NoLog, opts.NoSigs = !cfg.Debug, true
	opts.JetStream, opts.StoreDir = cfg.JetStream, filepath.Join(cfg.StoreDir, "jetstream")
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 8 << 20 // protobuf batches and snapshots of big fleets
	}
	if cfg.CredsFile != "" && len(opts.TrustedOperators) == 0 && len(opts.TrustedKeys) == 0 {
		return nil, errors.New("embedded NATS: a .creds file (--nats-creds) authenticates to a NATS that trusts its operator: " +
			"give the embedded server --nats-server-config with the operator and resolver, or use --nats-user or --nats-nkey")
	}
	if err := addServerAuth(opts, cfg); err != nil {
		return nil, err
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("embedded NATS: a TLS certificate and its key go together")
	}
	if cfg.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("embedded NATS TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS = tc, true
	}
	if !isLoopback(host) && !requiresAuth(opts) && !cfg.Insecure {
		return nil, InsecureListenError(net.JoinHostPort(host, strconv.Itoa(max(port, 0))))
	}
	return opts, nil
}
func (e *Embedded) unlock() {
	if e.lock != nil {
		_ = e.lock.Close() // closing drops the flock; nothing else to report
		e.lock = nil
	}
}

// ClientURL is the URL clients connect to (with the real port when a
// free one was picked); tls:// when the server requires TLS.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Dial opens this process's own connection to the server (Connect's
// reconnect-forever connection) with auth's credentials. With TLS it is
// an in-process connection: no network, so no certificate to check
// against a host name (the server lets in-process clients skip TLS), and
// auth's TLS files are not needed.
func (e *Embedded) Dial(ctx context.Context, name string, log *slog.Logger, auth ClientAuth, extra ...nats.Option) (*nats.Conn, error) {
	auth.TLSCA, auth.TLSCert, auth.TLSKey = "", "", ""
	if err := auth.Validate(); err != nil {
		return nil, err
	}
	opts, err := auth.credentialOptions()
	if err != nil {
		return nil, err
	}
	url := e.ClientURL()
	if e.tls {
		opts = append(opts, nats.InProcessServer(e.srv))
		url = "nats://" + strings.TrimPrefix(url, "tls://")
	}
	return Connect(ctx, url, name, log, append(opts, extra...)...)
}

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.unlock()
}
