// Package actors hosts the routing engine of one replica as protoactor-go
// actors. Each actor is a thin wrapper around a pure package and owns its
// state; nothing else touches it:
//
//   - shard actors (index.Indexer): the KV-cache map of a subset of workers;
//   - sequence actors (sequence.ActiveSequences): one per (worker, dp rank),
//     the requests in flight on it;
//   - the registry actor (registry.Registry): the workers and their ranks;
//   - the scheduler actor (decide.Node): it feeds the scheduler's state
//     machine every message it receives and carries out its effects (the
//     fan-out of a decision to the shards and sequence actors, replies,
//     gossip, metrics);
//   - the replication edge (tracking.Table): the requests peers routed.
//
// Router is the façade the HTTP API, the NATS ingestion and the cluster
// gossip call; it turns Go calls into messages and replies into results.
package actors
