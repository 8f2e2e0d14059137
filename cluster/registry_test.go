package cluster

import (
	"errors"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// A digest carries the registry digest only when the replica has one;
// frames without it decode as before.
func TestDigestRegistryOnTheWire(t *testing.T) {
	for _, d := range []digestMsg{
		{Origin: "a", Seq: 7, Digest: Digest{Count: 3, Hash: 99}},
		{Origin: "a", Seq: 7, Digest: Digest{Count: 3, Hash: 99}, Registry: 1 << 60, HasRegistry: true},
		{Origin: "a", Seq: 7, Digest: Digest{Count: 3, Hash: 99}, Registry: 0, HasRegistry: true},
	} {
		f, err := decodeFrame(encodeDigest(d))
		if err != nil || f.kind != frameDigest || !reflect.DeepEqual(f.digest, d) {
			t.Fatalf("round trip of %+v: %+v, %v", d, f.digest, err)
		}
	}
	bad := append(encodeDigest(digestMsg{Origin: "a"}), 1, 2, 3)
	if _, err := decodeFrame(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("digest with 3 trailing bytes: %v", err)
	}
}

func TestRegistryAgreement(t *testing.T) {
	var ours atomic.Uint64
	ours.Store(1)
	n := &Node{cfg: Config{RegistryDigest: ours.Load, RegistryDivergence: time.Minute}, log: slog.New(slog.DiscardHandler)}
	t0 := time.Now()
	digest := func(peer string, reg uint64) digestMsg {
		return digestMsg{Origin: peer, Registry: reg, HasRegistry: true}
	}
	n.checkRegistry(digest("b", 1), t0)
	n.checkRegistry(digestMsg{Origin: "c"}, t0) // an older replica: nothing to compare
	n.checkRegistry(digest("d", 2), t0)
	if m, div := n.RegistryAgreement(); m != 1 || div != nil {
		t.Fatalf("a fresh difference: mismatches %d, diverged %v", m, div)
	}
	n.checkRegistry(digest("d", 2), t0.Add(-2*time.Minute)) // still differing, seen earlier: since stays
	n.registry.peers["d"].since = t0.Add(-2 * time.Minute)
	n.checkRegistry(digest("d", 3), t0)
	if m, div := n.RegistryAgreement(); m != 3 || !reflect.DeepEqual(div, []string{"d"}) {
		t.Fatalf("a lasting difference: mismatches %d, diverged %v", m, div)
	}
	ours.Store(3) // this replica caught up
	n.checkRegistry(digest("d", 3), t0)
	if _, div := n.RegistryAgreement(); div != nil {
		t.Fatalf("agreeing again: diverged %v", div)
	}
	// Peers not heard from for long are forgotten.
	n.registry.peers["b"].last = t0.Add(-time.Hour)
	n.RegistryAgreement()
	if _, ok := n.registry.peers["b"]; ok {
		t.Fatal("a silent peer was kept")
	}
}
