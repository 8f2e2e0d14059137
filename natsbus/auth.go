package natsbus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ClientAuth is how a client proves who it is to NATS and protects the
// connection. At most one of CredsFile, NkeySeedFile and User is set.
// Files are read when connecting (and again on reconnects where nats.go
// does so: .creds and seeds), never logged.
type ClientAuth struct {
	// CredsFile is a .creds file (user JWT + nkey seed) for a NATS in
	// operator (decentralized JWT) mode.
	CredsFile string
	// NkeySeedFile holds a user nkey seed ("SU..."): the client signs the
	// server's nonce with it; the server knows only the public key.
	NkeySeedFile string
	// User and Password authenticate with a user/password pair.
	User, Password string
	// TLSCA is a PEM bundle the server's certificate must chain to
	// (default: the system roots). Any TLS field makes TLS required.
	TLSCA string
	// TLSCert and TLSKey are a client certificate, for servers that
	// verify clients (mutual TLS).
	TLSCert, TLSKey string
}

// Validate checks the combination, not the files.
func (a ClientAuth) Validate() error {
	n := 0
	for _, set := range []bool{a.CredsFile != "", a.NkeySeedFile != "", a.User != ""} {
		if set {
			n++
		}
	}
	var errs []error
	if n > 1 {
		errs = append(errs, errors.New("NATS: give one of a .creds file, an nkey seed, or a user, not several"))
	}
	if a.User != "" && a.Password == "" {
		errs = append(errs, errors.New("NATS: a user needs a password (from a file or the environment)"))
	}
	if a.User == "" && a.Password != "" {
		errs = append(errs, errors.New("NATS: a password without a user"))
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		errs = append(errs, errors.New("NATS: a TLS client certificate and its key go together"))
	}
	return errors.Join(errs...)
}

// TLS reports whether the client requires TLS.
func (a ClientAuth) TLS() bool { return a.TLSCA != "" || a.TLSCert != "" }

// credentialOptions are the nats.go options that authenticate.
func (a ClientAuth) credentialOptions() ([]nats.Option, error) {
	switch {
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("NATS creds: %w", err)
		}
		return []nats.Option{nats.UserCredentials(a.CredsFile)}, nil
	case a.NkeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(a.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("NATS nkey seed %s: %w", a.NkeySeedFile, err)
		}
		return []nats.Option{opt}, nil
	case a.User != "":
		return []nats.Option{nats.UserInfo(a.User, a.Password)}, nil
	}
	return nil, nil
}

// Options are the nats.go options for a connection over the network:
// credentials and TLS.
func (a ClientAuth) Options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	opts, err := a.credentialOptions()
	if err != nil {
		return nil, err
	}
	if a.TLSCA != "" {
		if _, err := os.Stat(a.TLSCA); err != nil {
			return nil, fmt.Errorf("NATS TLS CA: %w", err)
		}
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if a.TLS() {
		opts = append(opts, nats.Secure())
	}
	return opts, nil
}

// ReadSecretFile reads a password or token file: the whole file, without
// the trailing line break an editor or `echo` leaves.
func ReadSecretFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// ErrInsecureListen means an embedded server would accept unauthenticated
// clients from beyond this host.
var ErrInsecureListen = errors.New("embedded NATS refuses to listen beyond loopback without authentication")

// isLoopback reports whether host (of a listen address) is reachable
// from this host only. An empty host, 0.0.0.0 and :: bind every interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// requiresAuth reports whether the server options make every client
// authenticate: users, nkeys, a token, operator JWTs, an auth callout or
// verified client certificates — and no no_auth_user that lets a client
// in without credentials.
func requiresAuth(o *server.Options) bool {
	if o.NoAuthUser != "" {
		return false
	}
	return o.Username != "" || o.Authorization != "" || len(o.Users) > 0 || len(o.Nkeys) > 0 ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil ||
		o.CustomClientAuthentication != nil || o.TLSVerify
}

// addServerAuth adds the router's own credentials to the server's users,
// unless the config file already has that user or key.
func addServerAuth(o *server.Options, cfg EmbeddedConfig) error {
	switch {
	case cfg.User != "":
		for _, u := range o.Users {
			if u.Username == cfg.User {
				return nil
			}
		}
		if o.Username != "" || o.Authorization != "" {
			return errors.New("embedded NATS: the server config's single user or token cannot be combined with --nats-user; list users in an authorization users block")
		}
		o.Users = append(o.Users, &server.User{Username: cfg.User, Password: cfg.Password})
	case cfg.NkeySeedFile != "":
		seed, err := os.ReadFile(cfg.NkeySeedFile)
		if err != nil {
			return fmt.Errorf("embedded NATS nkey seed: %w", err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return fmt.Errorf("embedded NATS nkey seed %s: %w", cfg.NkeySeedFile, err)
		}
		pub, err := kp.PublicKey()
		kp.Wipe()
		if err != nil {
			return fmt.Errorf("embedded NATS nkey seed %s: %w", cfg.NkeySeedFile, err)
		}
		if !nkeys.IsValidPublicUserKey(pub) {
			return fmt.Errorf("embedded NATS nkey seed %s: not a user seed (SU...)", cfg.NkeySeedFile)
		}
		for _, u := range o.Nkeys {
			if u.Nkey == pub {
				return nil
			}
		}
		o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: pub})
	}
	return nil
}
