package cluster

import "sync/atomic"

// Stats are a Node's counters since Start (monotonic, except Members).
type Stats struct {
	EventsPublished uint64 // accepted by Publish
	EventsDropped   uint64 // rejected by Publish: local queue full
	EventsSent      uint64 // events in batches sent to the peers (counted once, not per peer)
	Batches         uint64 // batches flushed
	MessagesSent    uint64 // messages handed to memberlist, all peers and kinds
	UDPMessages     uint64 // of which over UDP (SendBestEffort)
	TCPMessages     uint64 // of which over TCP (SendReliable)
	StreamMessages  uint64 // of which over the peer's persistent stream
	BytesSent       uint64 // encoded bytes of MessagesSent
	SendErrors      uint64 // memberlist send failures
	PeerQueueDrops  uint64 // messages dropped because a peer's queue was full

	// Sent (sent.go): calls that had to wait for a peer, and peers they
	// gave up on, by reason.
	AckWaits     uint64
	AckTimeouts  uint64 // SentTimeout
	AckQueueFull uint64 // SentPeerQueueFull
	AckStalled   uint64 // SentStalled

	MessagesReceived uint64 // user messages taken from memberlist
	InboxDrops       uint64 // received messages dropped: apply loop behind
	Malformed        uint64 // received messages or events that failed to decode or validate
	EventsReceived   uint64 // remote events handed to the Sink
	EchoesIgnored    uint64 // own events seen coming back
	StaleEvents      uint64 // duplicates or events already covered
	EventsLost       uint64 // Seqs given up on after GapTimeout

	DigestsSent      uint64
	DigestsReceived  uint64
	DigestMismatches uint64 // digests that disagreed with the Sink's view
	RepairRequests   uint64 // full-state requests sent
	Repairs          uint64 // full states applied (Sink.ReplaceOrigin)
	RepairsAbandoned uint64 // requests timed out or overflowed
	StateReplies     uint64 // full states served to peers
	OriginsDropped   uint64 // Sink.DropOrigin calls

	SessionDigestsSent uint64 // session-table digests broadcast
	SessionMismatches  uint64 // peers' session digests that disagreed with ours
	SessionRequests    uint64 // session tables asked for
	SessionReplies     uint64 // session tables served
	SessionMerges      uint64 // peers' session tables merged
	SessionsTruncated  uint64 // entries left out of a served table to fit MaxFrameBytes

	StreamsAccepted  uint64 // inbound streams that completed the handshake as a current member
	StreamsRefused   uint64 // inbound connections that failed it: TLS, bad hello, label, not a member, bad signature
	StreamsOverLimit uint64 // inbound connections closed at once: MaxInboundStreams or the handshake slots taken
	StreamTimeouts   uint64 // inbound streams closed by StreamIdleTimeout or StreamFrameTimeout
	OversizedFrames  uint64 // frame headers above MaxFrameBytes (connection closed; also counted in Malformed)
	ForeignFrames    uint64 // frames dropped for speaking for another origin than the member that sent them
	Unauthenticated  uint64 // memberlist-path messages dropped: unsigned, or not signed by a current member
	KeyChanges       uint64 // key sets applied after Start (rotation)
	KeyReloadErrors  uint64 // key file reads or parses that failed (the keys in use stay)

	// Failure detector (detector.go).
	Suspicions     uint64 // live peers this replica marked suspect
	Refutations    uint64 // suspicions or deaths of this replica it refuted
	Deaths         uint64 // members this replica marked dead or left (graceful leaves, its own included)
	FalseDeaths    uint64 // peers marked dead or left that came back with the same boot key
	DegradedProbes uint64 // probes slowed by this replica's own poor health (Lifeguard awareness)
	// RejectedMessages counts memberlist's warnings and errors about one
	// inbound message (undecryptable, wrongly labelled, undecodable):
	// a wrong cluster key, a foreign cluster, or someone probing the port.
	RejectedMessages uint64
	// KeyMismatches counts gossip that could not be decrypted with this
	// replica's keys ("no installed keys could decrypt"): a peer's
	// message refused here, or this replica's join refused by a seed.
	KeyMismatches uint64
	HealthScore   int64 // Lifeguard awareness now: 0 healthy, up to AwarenessMaxMultiplier-1

	Members int // alive members, this replica included
	Keys    int // keys in the keyring (0: unauthenticated gossip)
}

// counters are the atomics behind Stats.
type counters struct {
	eventsPublished, eventsDropped, eventsSent, batches            atomic.Uint64
	messagesSent, udpMessages, tcpMessages, bytesSent, sendErrors  atomic.Uint64
	streamMessages                                                 atomic.Uint64
	peerQueueDrops, messagesReceived, inboxDrops, malformed        atomic.Uint64
	ackWaits, ackTimeouts, ackQueueFull, ackStalled                atomic.Uint64
	eventsReceived, echoesIgnored, staleEvents, eventsLost         atomic.Uint64
	digestsSent, digestsReceived, digestMismatches, repairRequests atomic.Uint64
	repairs, repairsAbandoned, stateReplies, originsDropped        atomic.Uint64
	streamsAccepted, streamsRefused, streamsOverLimit              atomic.Uint64
	streamTimeouts, oversizedFrames, foreignFrames                 atomic.Uint64
	unauthenticated, keyChanges, keyReloadErrors                   atomic.Uint64
	sessionDigestsSent, sessionMismatches, sessionRequests         atomic.Uint64
	sessionReplies, sessionMerges, sessionsTruncated               atomic.Uint64
	suspicions, refutations, deaths, falseDeaths, degradedProbes   atomic.Uint64
	rejectedMessages, keyMismatches                                atomic.Uint64
	lastKeyMismatch                                                atomic.Int64 // unix nanos
	healthScore                                                    atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		EventsPublished: c.eventsPublished.Load(), EventsDropped: c.eventsDropped.Load(),
		EventsSent: c.eventsSent.Load(), Batches: c.batches.Load(),
		MessagesSent: c.messagesSent.Load(), UDPMessages: c.udpMessages.Load(),
		TCPMessages: c.tcpMessages.Load(), StreamMessages: c.streamMessages.Load(), BytesSent: c.bytesSent.Load(),
		SendErrors: c.sendErrors.Load(), PeerQueueDrops: c.peerQueueDrops.Load(),
		AckWaits: c.ackWaits.Load(), AckTimeouts: c.ackTimeouts.Load(),
		AckQueueFull: c.ackQueueFull.Load(), AckStalled: c.ackStalled.Load(),
		MessagesReceived: c.messagesReceived.Load(), InboxDrops: c.inboxDrops.Load(),
		Malformed: c.malformed.Load(), EventsReceived: c.eventsReceived.Load(),
		EchoesIgnored: c.echoesIgnored.Load(), StaleEvents: c.staleEvents.Load(),
		EventsLost: c.eventsLost.Load(), DigestsSent: c.digestsSent.Load(),
		DigestsReceived: c.digestsReceived.Load(), DigestMismatches: c.digestMismatches.Load(),
		RepairRequests: c.repairRequests.Load(), Repairs: c.repairs.Load(),
		RepairsAbandoned: c.repairsAbandoned.Load(), StateReplies: c.stateReplies.Load(),
		OriginsDropped:  c.originsDropped.Load(),
		StreamsAccepted: c.streamsAccepted.Load(), StreamsRefused: c.streamsRefused.Load(),
		StreamsOverLimit: c.streamsOverLimit.Load(), StreamTimeouts: c.streamTimeouts.Load(),
		OversizedFrames: c.oversizedFrames.Load(), ForeignFrames: c.foreignFrames.Load(),
		Unauthenticated: c.unauthenticated.Load(), KeyChanges: c.keyChanges.Load(),
		KeyReloadErrors:    c.keyReloadErrors.Load(),
		SessionDigestsSent: c.sessionDigestsSent.Load(), SessionMismatches: c.sessionMismatches.Load(),
		SessionRequests: c.sessionRequests.Load(), SessionReplies: c.sessionReplies.Load(),
		SessionMerges: c.sessionMerges.Load(), SessionsTruncated: c.sessionsTruncated.Load(),
		Suspicions: c.suspicions.Load(), Refutations: c.refutations.Load(),
		Deaths: c.deaths.Load(), FalseDeaths: c.falseDeaths.Load(),
		DegradedProbes: c.degradedProbes.Load(), HealthScore: c.healthScore.Load(),
		RejectedMessages: c.rejectedMessages.Load(), KeyMismatches: c.keyMismatches.Load(),
	}
}
