package replica

import (
	"context"
	"slices"
	"time"
)

// snapshotLoop keeps the KV-event stream bounded: when it holds more than
// router_snapshot_threshold messages, or more than half of the stream's
// max messages or max bytes (so a stream of large messages is purged
// before its discard policy drops events), the snapshot replica (the one
// with the smallest id among the live members, so exactly one does it)
// stores its index with the stream sequence it reflects and purges the
// stream below it.
func (r *Replica) snapshotLoop() {
	t := time.NewTicker(r.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stopWarm:
			return
		case <-t.C:
		}
		if !r.warm.Load() || !r.isSnapshotter() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := r.snapshotIfLarge(ctx); err != nil {
			r.log.Warn("index snapshot failed", "err", err)
		}
		cancel()
	}
}

func (r *Replica) isSnapshotter() bool {
	members := r.Members()
	if len(members) == 0 {
		return true
	}
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.ReplicaID
	}
	return slices.Min(ids) == r.id
}

// snapshotIfLarge snapshots when the stream is over the threshold or
// near one of its bounds.
func (r *Replica) snapshotIfLarge(ctx context.Context) error {
	store := r.bus.snapshots
	size, err := store.StreamSize(ctx)
	if err != nil {
		return err
	}
	n := size.Msgs
	if n <= r.cfg.RouterSnapshotThreshold && !size.NearBound() {
		return nil
	}
	// Every event up to seq was handed to the shards; the barrier makes
	// sure they applied it. Events after seq may be in the dump too:
	// replaying them again on load is harmless (a duplicate store is a
	// no-op, and the stream order settles removals).
	seq := r.bus.events.LastStreamSeq()
	if seq == 0 {
		return nil
	}
	if err := r.router.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	evs, err := r.router.DumpIndex(ctx)
	if err != nil {
		return err
	}
	if err := store.Save(ctx, evs, seq); err != nil {
		return err
	}
	r.snapshots.Add(1)
	r.log.Info("index snapshot stored; stream purged", "stream_seq", seq, "events", len(evs),
		"stream_messages_before", n, "stream_bytes_before", size.Bytes, "took", time.Since(start))
	return nil
}
