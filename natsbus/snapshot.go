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

// SnapshotStore reads and writes index snapshots in a JetStream object
// store bucket.
type SnapshotStore struct {
	js     jetstream.JetStream
	bucket string
	stream string
}

// ErrNoSnapshot means the bucket holds no snapshot yet.
var ErrNoSnapshot = errors.New("no index snapshot")

// NewSnapshotStore opens (creating if absent) the bucket.
func NewSnapshotStore(ctx context.Context, nc *nats.Conn, bucket, stream string) (*SnapshotStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, Storage: jetstream.FileStorage}); err != nil {
		return nil, fmt.Errorf("snapshot bucket %s: %w", bucket, err)
	}
	return &SnapshotStore{js: js, bucket: bucket, stream: stream}, nil
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
	meta := jetstream.ObjectMeta{Name: snapshotObject, Metadata: map[string]string{snapshotSeqMeta: strconv.FormatUint(seq, 10)}}
	if _, err := obs.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("store snapshot: %w", err)
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

// StreamMessages is how many messages the stream holds now.
func (s *SnapshotStore) StreamMessages(ctx context.Context) (uint64, error) {
	stream, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return 0, fmt.Errorf("open stream %s: %w", s.stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s info: %w", s.stream, err)
	}
	return info.State.Msgs, nil
}
