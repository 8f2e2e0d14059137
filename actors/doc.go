// Package actors hosts the routing engine of one replica as protoactor-go
// actors. Each actor is a thin wrapper around a pure package and owns its
// state; nothing else touches it:
//
//   - shard actors (index.Indexer): the KV-cache map of a subset of workers;
//   - sequence actors (sequence.ActiveSequences): one per (worker, dp rank),
//     the requests in flight on it;
//   - the scheduler actor: the worker registry, the fan-out of one routing
//     decision to every shard and sequence actor, and the choice
//     (scheduling.Select).
//
// Router is the façade the HTTP API, the NATS ingestion and the cluster
// gossip call; it turns Go calls into messages and replies into results.
package actors
