package natsbus

import (
	"errors"
	"testing"
)

// Two embedded servers never share a JetStream store: the second is
// refused while the first runs, and the store is free again after it
// stops (the replica's store path no longer carries its random id, so
// this is what keeps two replicas given one --data-dir apart).
func TestEmbeddedStoreDirIsLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := StartEmbedded(EmbeddedConfig{StoreDir: dir, JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartEmbedded(EmbeddedConfig{StoreDir: dir, JetStream: true}); !errors.Is(err, ErrStoreDirInUse) {
		first.Shutdown()
		t.Fatalf("second server on the same store: %v, want ErrStoreDirInUse", err)
	}
	first.Shutdown()
	again, err := StartEmbedded(EmbeddedConfig{StoreDir: dir, JetStream: true})
	if err != nil {
		t.Fatalf("store not released by Shutdown: %v", err)
	}
	again.Shutdown()
}
