package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/replica"
)

const natsTestPassword = "kvrouter-test-password-1"

func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loopbackNATSURL is the replica's NATS URL with a 0.0.0.0 host made
// 127.0.0.1 (the address clients dial and the test certificate names).
func loopbackNATSURL(t *testing.T, rep *replica.Replica) string {
	t.Helper()
	u, err := url.Parse(rep.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", port)
	return u.String()
}

// An embedded NATS on a non-loopback address does not start without
// authentication; with a user (password from a file) it does, refuses
// unauthenticated clients, and takes heartbeats and KV events from an
// authenticated one. A second replica joins it as an external NATS with
// the password from the environment and replays the same index.
func TestEmbeddedNATSBeyondLoopbackRequiresAuth(t *testing.T) {
	cfg := config.Default()
	cfg.HTTPAddr, cfg.NATSListen, cfg.DataDir = "127.0.0.1:0", "0.0.0.0:0", t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rep, err := replica.Start(ctx, cfg, slog.New(slog.DiscardHandler)); err == nil {
		_ = rep.Shutdown(ctx)
		t.Fatal("an open embedded NATS on 0.0.0.0 started")
	} else if !strings.Contains(err.Error(), "--nats-insecure") || !strings.Contains(err.Error(), "--nats-user") {
		t.Fatalf("refusal does not name the fixes: %v", err)
	}

	pwFile := secretFile(t, natsTestPassword)
	first := StartReplica(t, func(c *config.Config) {
		c.NATSListen, c.NATSUser, c.NATSPasswordFile = "0.0.0.0:0", "router", pwFile
	})
	natsURL := loopbackNATSURL(t, first)
	if nc, err := nats.Connect(natsURL, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("an unauthenticated client connected")
	}
	if nc, err := nats.Connect(natsURL, nats.UserInfo("router", "wrong"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a wrong password was accepted")
	}
	nc, err := nats.Connect(natsURL, nats.UserInfo("router", natsTestPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	base := BaseURL(first)
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	for i := range 10 {
		publish(t, nc, "kvrouter.kv_events", storedEvent(1, uint64(i), tokens(64, uint32(i)), uint64(100*i)))
	}
	var want uint64
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		w := workers(t, base)
		if len(w.Workers) != 1 || w.Workers[0].Ranks[0].IndexedBlocks != 40 {
			return fmt.Errorf("index: %+v", w.Workers)
		}
		want = w.IndexDigest
		return nil
	})

	late := startReplicaEnv(t, map[string]string{"KVROUTER_NATS_PASSWORD": natsTestPassword},
		"--nats-url", natsURL, "--nats-user", "router", "--static-workers", "1=http://127.0.0.1:9")
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, body := Get(t, BaseURL(late)+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("late replica not ready: %s", body)
		}
		if got := workers(t, BaseURL(late)).IndexDigest; got != want {
			return fmt.Errorf("late replica digest %d, want %d", got, want)
		}
		return nil
	})
}

// startReplicaEnv starts a replica from flags and an environment, as
// `kvrouter serve` reads them (the password never is a flag).
func startReplicaEnv(t *testing.T, env map[string]string, args ...string) *replica.Replica {
	t.Helper()
	args = append([]string{"--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...)
	cfg, err := config.Load(args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return StartReplica(t, func(c *config.Config) { *c = cfg })
}

// TLS with a CA made in the test: the embedded server serves the
// certificate, the replica's own connection is in-process, and a second
// replica that trusts the CA joins over TLS; a client that does not trust
// it cannot connect.
func TestEmbeddedNATSWithTLS(t *testing.T) {
	caFile, certFile, keyFile := testCertificates(t)
	pwFile := secretFile(t, natsTestPassword)
	first := StartReplica(t, func(c *config.Config) {
		c.NATSUser, c.NATSPasswordFile = "router", pwFile
		c.NATSTLSCert, c.NATSTLSKey = certFile, keyFile
	})
	natsURL := first.NATSURL()
	if !strings.HasPrefix(natsURL, "tls://") {
		t.Fatalf("NATS URL %s, want tls://", natsURL)
	}
	if nc, err := nats.Connect(natsURL, nats.UserInfo("router", natsTestPassword), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client without the CA connected")
	}
	nc, err := nats.Connect(natsURL, nats.UserInfo("router", natsTestPassword), nats.RootCAs(caFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.kv_events", storedEvent(1, 0, tokens(64, 1), 100))
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if w := workers(t, BaseURL(first)); len(w.Workers) != 1 || w.Workers[0].Ranks[0].IndexedBlocks != 4 {
			return fmt.Errorf("index: %+v", w.Workers)
		}
		return nil
	})
	late := StartReplica(t, func(c *config.Config) {
		c.NATSURL, c.NATSUser, c.NATSPasswordFile, c.NATSTLSCA = natsURL, "router", pwFile, caFile
		c.StaticWorkers = []string{"1=http://127.0.0.1:9"}
	})
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if w := workers(t, BaseURL(late)); len(w.Workers) != 1 || w.Workers[0].Ranks[0].IndexedBlocks != 4 {
			return fmt.Errorf("late replica index: %+v", w.Workers)
		}
		return nil
	})
}

// testCertificates writes a CA and a server certificate for 127.0.0.1
// and localhost signed by it.
func testCertificates(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvrouter test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("nats.pem", "CERTIFICATE", der), write("nats-key.pem", "EC PRIVATE KEY", keyDER)
}
