package natsbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/messages"
)

// Snapshots keep the KV-event stream bounded (Dynamo's
// router_snapshot_threshold): one replica stores the index, as the events
// that rebuild it, with the stream sequence it reflects, then purges the
// stream up to that sequence. A replica that starts later loads the
// snapshot and reads the stream from the next sequence.

const (
	snapshotObject  = "index"
	snapshotSeqMeta = "stream-seq"
)

// DefaultSnapshotMaxBytes bounds the snapshot bucket: 2 GiB. A snapshot
// holds one Stored event per chain of a rank's blocks: about 20 bytes per
// indexed (worker, block) entry when chains are long (19.4 B for 64-block
// chains under a shared prefix), up to about 46 when every chain is one
// block. Storing one briefly holds the old and the new, so this fits
// snapshots of some 20 M entries at worst and 50 M typically.
const DefaultSnapshotMaxBytes int64 = 2 << 30

// SnapshotStoreConfig names the bucket and the stream it snapshots.
type SnapshotStoreConfig struct {
	Bucket string // object store bucket (created if absent)
	Stream string // the KV-event stream a snapshot lets us purge
	// MaxBytes bounds the bucket: 0 means DefaultSnapshotMaxBytes,
	// negative no bound. A snapshot that does not fit fails to store
	// (the previous one stays, the stream is not purged).
	MaxBytes int64
}

// SnapshotStore reads and writes index snapshots in a JetStream object
// store bucket.
type SnapshotStore struct {
	js       jetstream.JetStream
	bucket   string
	stream   string
	maxBytes int64
}

// ErrNoSnapshot means the bucket holds no snapshot yet.
var ErrNoSnapshot = errors.New("no index snapshot")

// NewSnapshotStore opens (creating if absent, updating its bound if it
// changed) the bucket.
func NewSnapshotStore(ctx context.Context, nc *nats.Conn, cfg SnapshotStoreConfig) (*SnapshotStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	maxBytes := streamLimit(cfg.MaxBytes, DefaultSnapshotMaxBytes)
	if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: cfg.Bucket, Storage: jetstream.FileStorage, MaxBytes: maxBytes,
	}); err != nil {
		return nil, fmt.Errorf("snapshot bucket %s: %w", cfg.Bucket, storageHint(err))
	}
	return &SnapshotStore{js: js, bucket: cfg.Bucket, stream: cfg.Stream, maxBytes: maxBytes}, nil
}

// Load returns the latest snapshot and the stream sequence it reflects.
func (s *SnapshotStore) Load(ctx context.Context) ([]*messages.KvEvent, uint64, error) {
	obs, err := s.js.ObjectStore(ctx, s.bucket)
	if err != nil {
		return nil, 0, fmt.Errorf("open bucket %s: %w", s.bucket, err)
	}
	info, err := obs.GetInfo(ctx, snapshotObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, ErrNoSnapshot
	}
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot info: %w", err)
	}
	seq, err := strconv.ParseUint(info.Metadata[snapshotSeqMeta], 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot has no valid %s metadata: %w", snapshotSeqMeta, err)
	}
	data, err := obs.GetBytes(ctx, snapshotObject)
	if err != nil {
		return nil, 0, fmt.Errorf("read snapshot: %w", err)
	}
	var batch messages.KvEventBatch
	if err := proto.Unmarshal(data, &batch); err != nil {
		return nil, 0, fmt.Errorf("decode snapshot: %w", err)
	}
	return batch.Events, seq, nil
}

// Save stores evs as the snapshot at stream sequence seq, then purges the
// stream below seq+1: every replica that had read past seq loses nothing,
// and one that starts later loads this snapshot first.
func (s *SnapshotStore) Save(ctx context.Context, evs []*messages.KvEvent, seq uint64) error {
	data, err := proto.Marshal(&messages.KvEventBatch{Events: evs})
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	obs, err := s.js.ObjectStore(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", s.bucket, err)
	}
	if err := s.checkFits(ctx, obs, len(data)); err != nil {
		return err
	}
	meta := jetstream.ObjectMeta{Name: snapshotObject, Metadata: map[string]string{snapshotSeqMeta: strconv.FormatUint(seq, 10)}}
	if _, err := obs.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		if s.maxBytes > 0 {
			return fmt.Errorf("store snapshot of %d bytes (bucket bound %d bytes, old snapshot included until the new one is stored; raise --snapshot-max-bytes): %w",
				len(data), s.maxBytes, err)
		}
		return fmt.Errorf("store snapshot of %d bytes: %w", len(data), err)
	}
	stream, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", s.stream, err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(seq+1)); err != nil {
		return fmt.Errorf("purge stream %s below %d: %w", s.stream, seq+1, err)
	}
	return nil
}

// Object store chunking: a snapshot is stored as chunks of chunkSize
// bytes, each a stream message with its subject and headers (at most
// chunkOverhead bytes more), plus a metadata message.
const (
	chunkSize     = 128 << 10
	chunkOverhead = 512
	metaOverhead  = 4 << 10
)

// ErrSnapshotTooLarge means a snapshot does not fit in the bucket's bound
// next to the one it replaces.
var ErrSnapshotTooLarge = errors.New("index snapshot does not fit the snapshot bucket (raise --snapshot-max-bytes)")

// checkFits refuses a snapshot the bucket cannot hold beside the current
// one before writing anything: a put that the bound cuts short can leave
// the object's metadata pointing at chunks that were never stored, and the
// old snapshot unreadable.
func (s *SnapshotStore) checkFits(ctx context.Context, obs jetstream.ObjectStore, size int) error {
	if s.maxBytes <= 0 {
		return nil
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return fmt.Errorf("snapshot bucket %s status: %w", s.bucket, err)
	}
	need := uint64(size) + uint64(size/chunkSize+1)*chunkOverhead + metaOverhead
	if st.Size()+need > uint64(s.maxBytes) {
		return fmt.Errorf("%w: %d bytes to store, %d held by the current snapshot, bound %d",
			ErrSnapshotTooLarge, size, st.Size(), s.maxBytes)
	}
	return nil
}

// StreamSize is what the stream holds now and its bounds (-1: none).
type StreamSize struct {
	Msgs, Bytes       uint64
	MaxMsgs, MaxBytes int64
}

// StreamSize reads the stream's size and bounds.
func (s *SnapshotStore) StreamSize(ctx context.Context) (StreamSize, error) {
	stream, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return StreamSize{}, fmt.Errorf("open stream %s: %w", s.stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return StreamSize{}, fmt.Errorf("stream %s info: %w", s.stream, err)
	}
	return StreamSize{Msgs: info.State.Msgs, Bytes: info.State.Bytes, MaxMsgs: info.Config.MaxMsgs, MaxBytes: info.Config.MaxBytes}, nil
}

// NearBound reports whether the stream is past half of one of its
// bounds: time to snapshot before the discard policy drops events a
// late replica would need.
func (z StreamSize) NearBound() bool {
	return (z.MaxMsgs > 0 && z.Msgs > uint64(z.MaxMsgs)/2) || (z.MaxBytes > 0 && z.Bytes > uint64(z.MaxBytes)/2)
}
