package natsbus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// The KV-event stream is bounded (messages, bytes, age) and drops its
// oldest events when full, including a stream created before the bounds
// existed (CreateOrUpdate brings it to the configured bounds); the
// defaults apply when none are given.
func TestEventStreamIsBounded(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// As an older router created it: no bounds but age.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_BOUND", Subjects: []string{"kv.b", "kv.b.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	var c collector
	src, err := StartEventSource(ctx, nc, EventSourceConfig{Subject: "kv.b", Stream: "KV_BOUND", MaxMsgs: 10, MaxBytes: 1 << 20, Log: quiet}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range 25 {
		publishJSON(t, nc, "kv.b", stored(1, uint64(i)))
	}
	// The source may miss what the bound discards before it reads it.
	testutil.Eventually(t, waitTimeout, "the last event", func() bool { return src.LastStreamSeq() == 25 })
	stream, err := js.Stream(ctx, "KV_BOUND")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	if cfg.MaxMsgs != 10 || cfg.MaxBytes != 1<<20 || cfg.Discard != jetstream.DiscardOld || cfg.MaxAge != DefaultMaxAge {
		t.Fatalf("stream config: max msgs %d, max bytes %d, discard %v, max age %v", cfg.MaxMsgs, cfg.MaxBytes, cfg.Discard, cfg.MaxAge)
	}
	if info.State.Msgs != 10 || info.State.FirstSeq != 16 {
		t.Fatalf("stream holds %d messages from %d, want the newest 10 (16..25)", info.State.Msgs, info.State.FirstSeq)
	}

	// Defaults, and negative = no bound.
	def := EventSourceConfig{}
	def.applyDefaults()
	none := EventSourceConfig{MaxAge: -1, MaxMsgs: -1, MaxBytes: -1}
	none.applyDefaults()
	if def.MaxMsgs != DefaultMaxMsgs || def.MaxBytes != DefaultMaxBytes || def.MaxAge != DefaultMaxAge ||
		none.MaxMsgs != -1 || none.MaxBytes != -1 || none.MaxAge != 0 {
		t.Fatalf("defaults %+v, unbounded %+v", def, none)
	}
}

// The snapshot bucket is bounded: a snapshot that does not fit is not
// stored, the error names the bound, and the stream is not purged.
func TestSnapshotBucketIsBounded(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	ctx := context.Background()
	src, err := StartEventSource(ctx, nc, EventSourceConfig{Subject: "kv.s", Stream: "KV_SNAP", Log: quiet}, func(*kv.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range 5 {
		publishJSON(t, nc, "kv.s", stored(1, uint64(i)))
	}
	store, err := NewSnapshotStore(ctx, nc, SnapshotStoreConfig{Bucket: "SNAP_BOUND", Stream: "KV_SNAP", MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(ctx, "SNAP_BOUND")
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(*jetstream.ObjectBucketStatus).StreamInfo().Config.MaxBytes; got != 64<<10 {
		t.Fatalf("bucket max bytes %d", got)
	}
	small := []*messages.KvEvent{{Worker: &messages.WorkerRank{WorkerId: 1}, EventId: 1}}
	if err := store.Save(ctx, small, 2); err != nil {
		t.Fatal(err)
	}
	big := make([]*messages.KvEvent, 20_000) // ~200 kB encoded
	for i := range big {
		big[i] = &messages.KvEvent{Worker: &messages.WorkerRank{WorkerId: uint64(i) + 1}, EventId: uint64(i) + 1}
	}
	err = store.Save(ctx, big, 4)
	if !errors.Is(err, ErrSnapshotTooLarge) || !strings.Contains(err.Error(), "snapshot-max-bytes") {
		t.Fatalf("oversized snapshot: %v, want an error naming the bound", err)
	}
	evs, seq, err := store.Load(ctx)
	if err != nil || seq != 2 || len(evs) != 1 {
		t.Fatalf("after the failed save: %d events at %d, %v; want the small snapshot", len(evs), seq, err)
	}
	size, err := store.StreamSize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if size.Msgs != 3 || size.MaxMsgs != DefaultMaxMsgs || size.MaxBytes != DefaultMaxBytes {
		t.Fatalf("stream %+v: want 3 messages left (purged up to 2 only) and the default bounds", size)
	}
}

func TestStreamSizeNearBound(t *testing.T) {
	for _, c := range []struct {
		z    StreamSize
		near bool
	}{
		{StreamSize{Msgs: 10, Bytes: 10, MaxMsgs: 100, MaxBytes: 100}, false},
		{StreamSize{Msgs: 51, Bytes: 10, MaxMsgs: 100, MaxBytes: 100}, true},
		{StreamSize{Msgs: 10, Bytes: 51, MaxMsgs: 100, MaxBytes: 100}, true},
		{StreamSize{Msgs: 1 << 40, Bytes: 1 << 40, MaxMsgs: -1, MaxBytes: -1}, false},
	} {
		if got := c.z.NearBound(); got != c.near {
			t.Errorf("%+v: near %v, want %v", c.z, got, c.near)
		}
	}
}
