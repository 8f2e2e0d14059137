package natsbus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/kvrouter/kvrouter/kv"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startAuthServer(t *testing.T, cfg EmbeddedConfig) *Embedded {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	e, err := StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func connectWith(t *testing.T, url string, auth ClientAuth) (*nats.Conn, error) {
	t.Helper()
	opts, err := auth.Options()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := Connect(ctx, url, "auth-test", quiet, opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

// roundTrip checks the connection can subscribe and publish.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.SubscribeSync("auth.echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("auth.echo", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("round trip: %v", err)
	}
}

func wantAuthRefused(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: connected, want an authorization error", what)
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("%s: %v, want an authorization error", what, err)
	}
}

// An embedded server on a non-loopback address with no authentication is
// refused (clear error naming the flags), unless --nats-insecure; with a
// user it starts. Loopback needs nothing.
func TestEmbeddedRefusesOpenNonLoopback(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		_, err := StartEmbedded(EmbeddedConfig{Listen: listen})
		if !errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "--nats-insecure") || !strings.Contains(err.Error(), "--nats-user") {
			t.Fatalf("%s without auth: %v", listen, err)
		}
	}
	startAuthServer(t, EmbeddedConfig{Listen: "0.0.0.0:0", Insecure: true})
	startAuthServer(t, EmbeddedConfig{Listen: "0.0.0.0:0", User: "router", Password: "s3cret-pass"})
	startAuthServer(t, EmbeddedConfig{Listen: "localhost:0"})
	// A no_auth_user lets clients in without credentials: not auth.
	conf := writeFile(t, "open.conf", `authorization { users = [ {user: a, password: b} ] }
no_auth_user: a
`)
	if _, err := StartEmbedded(EmbeddedConfig{Listen: "0.0.0.0:0", ConfigFile: conf}); !errors.Is(err, ErrInsecureListen) {
		t.Fatalf("no_auth_user: %v", err)
	}
}

func TestEmbeddedUserPassword(t *testing.T) {
	e := startAuthServer(t, EmbeddedConfig{Listen: "0.0.0.0:0", User: "router", Password: "s3cret-pass", StoreDir: t.TempDir(), JetStream: true})
	url := e.ClientURL()
	_, err := connectWith(t, url, ClientAuth{})
	wantAuthRefused(t, err, "no credentials")
	_, err = connectWith(t, url, ClientAuth{User: "router", Password: "wrong"})
	wantAuthRefused(t, err, "wrong password")
	nc, err := connectWith(t, url, ClientAuth{User: "router", Password: "s3cret-pass"})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, nc)
	// The router's own connection, as the replica makes it.
	own, err := e.Dial(context.Background(), "own", quiet, ClientAuth{User: "router", Password: "s3cret-pass"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	roundTrip(t, own)
	src, err := StartEventSource(context.Background(), own, EventSourceConfig{Stream: "KV_AUTH", Log: quiet}, func(*kv.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Mode() != ModeJetStream {
		t.Fatalf("mode %s: JetStream must work for the authenticated router", src.Mode())
	}
}

func TestEmbeddedNkey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	seedFile := writeFile(t, "router.nk", string(seed)+"\n")
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := writeFile(t, "other.nk", string(otherSeed))

	e := startAuthServer(t, EmbeddedConfig{Listen: "0.0.0.0:0", NkeySeedFile: seedFile})
	_, err = connectWith(t, e.ClientURL(), ClientAuth{})
	wantAuthRefused(t, err, "no credentials")
	_, err = connectWith(t, e.ClientURL(), ClientAuth{NkeySeedFile: otherFile})
	wantAuthRefused(t, err, "unknown nkey")
	nc, err := connectWith(t, e.ClientURL(), ClientAuth{NkeySeedFile: seedFile})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, nc)

	pub, _ := kp.PublicKey()
	if _, err := StartEmbedded(EmbeddedConfig{NkeySeedFile: writeFile(t, "pub.nk", pub)}); err == nil {
		t.Fatal("a public key is not a seed")
	}
}

// testPKI is a CA and a server certificate for 127.0.0.1 and localhost,
// made in the test.
type testPKI struct{ caFile, certFile, keyFile, otherCAFile string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		return cert, key, der
	}
	ca, caKey, caDER := newCA("kvrouter test CA")
	_, _, otherDER := newCA("another CA")
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
	return testPKI{
		caFile: writePEM("ca.pem", "CERTIFICATE", caDER), otherCAFile: writePEM("other-ca.pem", "CERTIFICATE", otherDER),
		certFile: writePEM("server.pem", "CERTIFICATE", der), keyFile: writePEM("server-key.pem", "EC PRIVATE KEY", keyDER),
	}
}

// TLS with a CA made in the test: a client that trusts the CA connects
// (with credentials), one that does not or that talks plain text fails;
// the server's own process connects in-process.
func TestEmbeddedTLS(t *testing.T) {
	pki := newTestPKI(t)
	e := startAuthServer(t, EmbeddedConfig{Listen: "127.0.0.1:0", User: "router", Password: "s3cret-pass",
		TLSCert: pki.certFile, TLSKey: pki.keyFile, StoreDir: t.TempDir(), JetStream: true})
	url := e.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Fatalf("client URL %s, want tls://", url)
	}
	creds := ClientAuth{User: "router", Password: "s3cret-pass", TLSCA: pki.caFile}
	nc, err := connectWith(t, url, creds)
	if err != nil {
		t.Fatal(err)
	}
	if !nc.TLSRequired() {
		t.Fatal("connection is not TLS")
	}
	roundTrip(t, nc)
	wrongCA := creds
	wrongCA.TLSCA = pki.otherCAFile
	if _, err := connectWith(t, url, wrongCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client trusting another CA: %v, want a certificate error", err)
	}
	plain := creds
	plain.TLSCA = ""
	plainURL := "nats://" + strings.TrimPrefix(url, "tls://")
	if _, err := connectWith(t, plainURL, plain); err == nil {
		t.Fatal("a plain-text client connected to a TLS server")
	}
	noCreds := creds
	noCreds.User, noCreds.Password = "", ""
	_, err = connectWith(t, url, noCreds)
	wantAuthRefused(t, err, "TLS without credentials")

	own, err := e.Dial(context.Background(), "own", quiet, ClientAuth{User: "router", Password: "s3cret-pass", TLSCA: pki.otherCAFile})
	if err != nil {
		t.Fatalf("in-process connection: %v", err)
	}
	defer own.Close()
	roundTrip(t, own)
}

// A nats-server config file gives workers their own user, allowed to
// publish KV events and heartbeats and nothing else: it cannot read the
// bus, nor purge the stream through the JetStream API.
func TestEmbeddedConfigFilePermissions(t *testing.T) {
	conf := writeFile(t, "nats.conf", `
authorization {
  users = [
    {user: worker, password: w0rker-pass, permissions: {
      publish: ["kvrouter.kv_events", "kvrouter.kv_events.>", "kvrouter.workers"]
      subscribe: []
    }}
  ]
}
`)
	e := startAuthServer(t, EmbeddedConfig{Listen: "0.0.0.0:0", ConfigFile: conf, User: "router", Password: "s3cret-pass",
		StoreDir: t.TempDir(), JetStream: true})
	router, err := connectWith(t, e.ClientURL(), ClientAuth{User: "router", Password: "s3cret-pass"})
	if err != nil {
		t.Fatal(err)
	}
	var c collector
	src, err := StartEventSource(context.Background(), router, EventSourceConfig{Stream: DefaultStream, Log: quiet}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	errs := make(chan error, 8)
	opts, _ := ClientAuth{User: "worker", Password: "w0rker-pass"}.Options()
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	worker, err := Connect(context.Background(), e.ClientURL(), "worker", quiet, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	publishJSON(t, worker, DefaultEventsSubject, stored(1, 1))
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for c.len() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c.len() != 1 {
		t.Fatal("the worker's KV event did not arrive")
	}
	js, err := jetstream.New(worker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	stream, err := js.Stream(ctx, DefaultStream)
	if err == nil {
		err = stream.Purge(ctx)
	}
	if err == nil {
		t.Fatal("the worker user purged the stream")
	}
	if _, err := worker.SubscribeSync(DefaultEventsSubject); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("subscribe: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the worker user subscribed to the events without a permissions violation")
	}
}

// --nats-creds: a NATS in operator (JWT) mode, configured by the embedded
// server's config file, lets in a client with the .creds of a user its
// account signed, and no other.
func TestEmbeddedOperatorCreds(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "test-operator"
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "kvrouter"
	ac.Limits.JetStreamLimits.DiskStorage = -1
	ac.Limits.JetStreamLimits.MemoryStorage = -1
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	sakp, _ := nkeys.CreateAccount()
	sapub, _ := sakp.PublicKey()
	sac := jwt.NewAccountClaims(sapub)
	sac.Name = "SYS"
	sajwt, err := sac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	oc.SystemAccount = sapub
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	credsFile := writeFile(t, "router.creds", string(creds))
	conf := writeFile(t, "operator.conf", fmt.Sprintf(`
operator: %s
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %s
  %s: %s
}
`, ojwt, sapub, apub, ajwt, sapub, sajwt))

	if _, err := StartEmbedded(EmbeddedConfig{CredsFile: credsFile}); err == nil || !strings.Contains(err.Error(), "--nats-server-config") {
		t.Fatalf(".creds without an operator config: %v", err)
	}
	e := startAuthServer(t, EmbeddedConfig{Listen: "0.0.0.0:0", ConfigFile: conf, CredsFile: credsFile})
	_, err = connectWith(t, e.ClientURL(), ClientAuth{})
	wantAuthRefused(t, err, "no credentials")
	nc, err := connectWith(t, e.ClientURL(), ClientAuth{CredsFile: credsFile})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, nc)
}

func TestClientAuthValidate(t *testing.T) {
	for _, c := range []struct {
		a  ClientAuth
		ok bool
	}{
		{ClientAuth{}, true},
		{ClientAuth{User: "u", Password: "p", TLSCA: "ca"}, true},
		{ClientAuth{CredsFile: "c", TLSCert: "c", TLSKey: "k"}, true},
		{ClientAuth{CredsFile: "c", NkeySeedFile: "n"}, false},
		{ClientAuth{NkeySeedFile: "n", User: "u", Password: "p"}, false},
		{ClientAuth{User: "u"}, false},
		{ClientAuth{Password: "p"}, false},
		{ClientAuth{TLSCert: "c"}, false},
	} {
		if err := c.a.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.a, err)
		}
	}
	p := writeFile(t, "pw", "hunter2-long\n")
	if s, err := ReadSecretFile(p); err != nil || s != "hunter2-long" {
		t.Fatalf("ReadSecretFile: %q, %v", s, err)
	}
	if _, err := ReadSecretFile(writeFile(t, "empty", "\n")); err == nil {
		t.Fatal("an empty secret file must be an error")
	}
}
