// Package cluster makes router replicas share their active-sequence (load)
// view over hashicorp/memberlist.
//
// Every replica publishes its own routing decisions (add, prefill completed,
// free) as messages.SequenceEvent values; the Node stamps them with the
// replica id (Origin) and a per-origin sequence number (Seq), batches them
// like Dynamo's replica sync (up to 256 events or 1 ms) and sends each batch
// directly to every live peer. Prefix (KV-block) state is not gossiped: every
// replica reads the engines' KV events itself.
//
// # Transport choice
//
// Batches are not put on memberlist's gossip queue: user broadcasts only get
// what is left of a 1400-byte packet after membership traffic, and their
// spread is probabilistic. Instead a per-peer sender writes each batch to
// the peer over one persistent TCP stream (the peer advertises its stream
// port in node metadata): one write per batch, no size limit, the peer's
// batches in order. Without a stream (a peer that advertises none, or a
// broken connection) a batch falls back to memberlist: UDP (SendBestEffort)
// when it fits in one packet, memberlist's per-message TCP (SendReliable)
// otherwise. The fallback can reorder and UDP can lose, so the receiver
// re-orders by Seq, waits a short time for gaps to fill and then asks the
// origin for its full state.
//
// # Anti-entropy
//
// Periodically each replica sends a Digest of its own requests (count and an
// order-independent hash of request ids and their prefill state) tagged with
// the Seq it describes. A peer compares it with what its Sink holds for that
// origin at exactly that Seq; on a mismatch it asks the origin for its full
// state, replaces what it holds (Sink.ReplaceOrigin) and replays the events
// that arrived after the snapshot. This repairs losses after partitions,
// dropped packets, or events the Sink itself dropped.
//
// # Membership
//
// When memberlist declares a replica dead or left, the Sink is told at once
// (Sink.DropOrigin) to forget every request that replica routed.
package cluster
