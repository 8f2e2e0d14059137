package cluster

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync/atomic"
	"time"
)

// The persistent streams' TLS layer admits the fleet: with a cluster key,
// every replica presents a certificate whose ed25519 key is derived from
// its primary cluster key (HKDF-SHA256) and accepts a peer presenting a
// key derived from any key of its keyring, so a rotation (add, make
// primary, remove) never cuts a stream; with --cluster-tls-* files it
// presents that certificate and accepts a peer whose certificate chains to
// the CA. Which member a stream belongs to is proven inside it (see
// streams.go: the hello is signed with the replica's boot key).

type trustMode uint8

const (
	trustNone trustMode = iota // plaintext TCP (insecure clusters)
	trustKey                   // certificates derived from the cluster keys
	trustCA                    // operator's certificate and CA files
)

func (m trustMode) String() string {
	switch m {
	case trustKey:
		return "tls (cluster key)"
	case trustCA:
		return "mtls (ca)"
	}
	return "plaintext"
}

// identityHKDFSalt separates the stream identity from the memberlist use
// of the same key (AES-GCM): neither leaks anything about the other.
const identityHKDFSalt = "kvrouter cluster stream identity v1"

// derivedIdentity is the TLS identity derived from one cluster key.
type derivedIdentity struct {
	pub  ed25519.PublicKey
	cert tls.Certificate
}

func deriveIdentity(key []byte) (*derivedIdentity, error) {
	seed, err := hkdf.Key(sha256.New, key, []byte(identityHKDFSalt), "ed25519 seed", ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("derive stream identity: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	// Self-signed; what is checked is the key, never names or dates (the
	// TLS handshake proves the peer holds the private key).
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kvrouter-cluster " + KeyID(key)},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("stream certificate: %w", err)
	}
	return &derivedIdentity{pub: pub, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}}, nil
}

// streamTrust builds the streams' TLS configurations. Its key set can be
// swapped at run time (key rotation); certificate files are read at
// every handshake, so renewed files take effect on the next connection.
type streamTrust struct {
	mode                      trustMode
	ids                       atomic.Pointer[[]*derivedIdentity] // trustKey: primary first
	certFile, keyFile, caFile string                             // trustCA
}

func newStreamTrust(c Config, keys [][]byte) (*streamTrust, error) {
	t := &streamTrust{}
	switch {
	case c.TLSCertFile != "":
		t.mode, t.certFile, t.keyFile, t.caFile = trustCA, c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile
		// Fail at start, not at the first peer, on unreadable files.
		if _, err := t.loadPair(); err != nil {
			return nil, err
		}
		if _, err := t.loadCA(); err != nil {
			return nil, err
		}
	case len(keys) > 0:
		t.mode = trustKey
		if err := t.setKeys(keys); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *streamTrust) setKeys(keys [][]byte) error {
	if t.mode != trustKey {
		return nil
	}
	ids := make([]*derivedIdentity, 0, len(keys))
	for _, k := range keys {
		id, err := deriveIdentity(k)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	t.ids.Store(&ids)
	return nil
}

func (t *streamTrust) loadPair() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS certificate: %w", err)
	}
	return &c, nil
}

func (t *streamTrust) loadCA() (*x509.CertPool, error) {
	pem, err := os.ReadFile(t.caFile)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster TLS CA %s: no PEM certificate", t.caFile)
	}
	return pool, nil
}

func (t *streamTrust) ownCert() (*tls.Certificate, error) {
	if t.mode == trustCA {
		return t.loadPair()
	}
	return &(*t.ids.Load())[0].cert, nil
}

var errUntrustedPeer = errors.New("peer certificate not trusted")

// verify accepts a peer certificate chain under the current trust. Both
// sides run it (the client skips Go's host-name verification: peers are
// dialled by IP and trust is the key or the CA, not a name).
func (t *streamTrust) verify(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return errUntrustedPeer
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return fmt.Errorf("%w: %w", errUntrustedPeer, err)
	}
	if t.mode == trustKey {
		pub, ok := leaf.PublicKey.(ed25519.PublicKey)
		if !ok {
			return errUntrustedPeer
		}
		for _, id := range *t.ids.Load() {
			if bytes.Equal(pub, id.pub) {
				return nil
			}
		}
		return fmt.Errorf("%w: not derived from a key of this cluster", errUntrustedPeer)
	}
	roots, err := t.loadCA()
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, r := range raw[1:] {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("%w: %w", errUntrustedPeer, err)
		}
		inter.AddCert(c)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("%w: %w", errUntrustedPeer, err)
	}
	return nil
}

func (t *streamTrust) serverConfig() *tls.Config {
	if t.mode == trustNone {
		return nil
	}
	return &tls.Config{
		MinVersion:            tls.VersionTLS13,
		ClientAuth:            tls.RequireAnyClientCert,
		GetCertificate:        func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return t.ownCert() },
		VerifyPeerCertificate: t.verify,
	}
}

func (t *streamTrust) clientConfig() *tls.Config {
	if t.mode == trustNone {
		return nil
	}
	return &tls.Config{
		MinVersion:            tls.VersionTLS13,
		InsecureSkipVerify:    true, // verify (above) checks the key or the CA chain instead of a host name
		GetClientCertificate:  func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return t.ownCert() },
		VerifyPeerCertificate: t.verify,
	}
}
