package natsbus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

func TestStartEmbeddedRejectsBadConfig(t *testing.T) {
	tests := []struct {
		cfg  EmbeddedConfig
		want string
	}{
		{EmbeddedConfig{Listen: "no-port"}, "listen"},
		{EmbeddedConfig{Listen: "127.0.0.1:http"}, "bad port"},
		{EmbeddedConfig{Listen: "127.0.0.1:70000"}, "bad port"},
		{EmbeddedConfig{JetStream: true}, "StoreDir"},
	}
	for _, tt := range tests {
		_, err := StartEmbedded(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want one mentioning %q", tt.cfg, err, tt.want)
		}
	}
	if _, err := StartEmbedded(EmbeddedConfig{JetStream: true}); !errors.Is(err, ErrNoStoreDir) {
		t.Errorf("err = %v, want ErrNoStoreDir", err)
	}
}

func TestConnectFailsClearly(t *testing.T) {
	// A port nothing listens on.
	url := "nats://" + testutil.FreeAddr(t)
	if _, err := Connect(context.Background(), url, "t", quiet); err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("err = %v, want one naming %s", err, url)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Connect(ctx, "nats://192.0.2.1:4222", "t", quiet); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// The connection survives a server restart on the same port and Status
// follows it.
func TestConnectionReconnectsAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	e, err := StartEmbedded(EmbeddedConfig{StoreDir: dir, JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	nc := dial(t, e)
	if st := Status(nc); !st.Connected || st.State != "CONNECTED" || st.Server == "" || st.Reconnects != 0 {
		t.Fatalf("status %+v", st)
	}
	addr := strings.TrimPrefix(e.ClientURL(), "nats://")
	e.Shutdown()
	testutil.Eventually(t, waitTimeout, "disconnect noticed", func() bool { return !Status(nc).Connected })
	e2, err := StartEmbedded(EmbeddedConfig{Listen: addr, StoreDir: dir, JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Shutdown)
	testutil.Eventually(t, waitTimeout, "reconnect", func() bool { st := Status(nc); return st.Connected && st.Reconnects == 1 })
	if st := Status(nil); st.Connected || st.State != "DISCONNECTED" {
		t.Fatalf("nil connection status %+v", st)
	}
}
