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
// port in node metadata): one write per batch, the peer's batches in
// order. Without a stream (a broken connection, or a peer refusing it) a
// batch falls back to memberlist: UDP (SendBestEffort) when it fits in one
// packet, memberlist's per-message TCP (SendReliable) otherwise. The fallback can reorder and UDP can lose, so the receiver
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
// (Sink.DropOrigin) to forget every request that replica routed. Events of
// an origin memberlist does not list as alive are dropped: a replica that
// never joined would never be declared dead.
//
// # Security
//
// Who may speak: only members, and each only for itself.
//
//   - memberlist (UDP and TCP on BindPort) is encrypted and authenticated
//     with the cluster keys (Keys or KeyFile; AES-GCM, the primary used to
//     send, every key of the ring accepted) and carries the Label: without
//     a key nobody can join, probe, gossip or send a message. A key file is
//     re-read every KeyReloadInterval, so keys rotate without restarts:
//     add the new key second on every replica, then make it first, then
//     remove the old one, each step on every replica before the next.
//   - The persistent streams (a random TCP port next to BindAddr) are TLS
//     1.3: each side presents an ed25519 certificate derived (HKDF) from
//     its primary key and accepts one derived from any key of its ring, or,
//     with TLSCertFile/TLSKeyFile/TLSCAFile, certificates of the operator's
//     CA. Inside, the dialer's hello is signed with its boot key, whose
//     public half it advertises in memberlist metadata; the server accepts
//     it only from a current member, as that member. Messages sent over
//     memberlist's paths are signed with the same boot key.
//   - Every frame is bound to the member that sent it (frame.speaksFor):
//     its events, digest, full state or state request must be that
//     member's own; a frame speaking for another origin is dropped whole
//     and counted (ForeignFrames). A member may free another replica's
//     request (a client may finish it through any replica), but only as an
//     event of its own origin. Full states go only to members that asked
//     and are taken only from the origin itself, answering our request.
//   - Resources: a frame header above MaxFrameBytes closes the connection
//     before anything is allocated and a frame's buffer grows only as its
//     bytes arrive; the handshake is bounded by TCPTimeout, a frame by
//     StreamFrameTimeout, silence by StreamIdleTimeout; at most
//     MaxInboundStreams inbound connections (16 of them still in their
//     handshake) are open, the rest closed at once and counted.
//
// Without keys gossip is neither encrypted nor authenticated; Validate
// refuses that on a non-loopback BindAddr unless Insecure is set.
// The shared key proves fleet membership, not which member: a replica
// holding it is trusted to speak for itself (memberlist itself cannot tell
// members apart), so a compromised replica can still disturb membership.
package cluster
