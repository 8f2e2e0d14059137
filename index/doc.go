// Package index is the KV-cache map of one indexer shard: which worker rank
// holds which chain of KV blocks, and how long a prompt's prefix each rank
// already has cached. It follows the semantics of Dynamo's RadixTree and is
// pure: no goroutines, no clock (time is an argument), no I/O.
//
// # Structure
//
// A [Tree] is a radix tree navigated by [kv.LocalBlockHash] (the content
// hash of one block, Dynamo's tokens_hash). Each node records which worker
// ranks hold the block and, per rank, the engine's own name for it
// ([kv.ExternalBlockHash], Dynamo's block_hash). A per-rank lookup maps
// engine names back to nodes so Removed events and the parent of a Stored
// event can be found in O(1). A node with many children also lists them
// per rank, so removing a block for one rank costs O(blocks that rank holds
// below it), however many ranks share the block; a per-worker list of
// ranks does the same for RemoveWorker. A Cleared event empties only the
// (worker, dp_rank) that sent it, on every tier (see [Indexer.Apply]).
//
// An [Indexer] keeps one Tree per storage tier and answers tiered overlap
// queries. [Approx] predicts the cache from the router's own decisions with
// a TTL and a size bound (Dynamo's approximate mode, use_kv_events=false).
//
// # Invariants
//
// Every node except the root is held by at least one rank, and a rank that
// holds a node holds every ancestor of it (worker sets shrink along a
// path). Dynamo relies on the second property in find_matches but does not
// enforce it; this package does, which is what lets FindMatches decide in
// O(1) per level that nobody dropped out. [Tree.CheckInvariants] verifies
// both plus the consistency of the lookups and of the per-rank lists.
//
// # Deviations from Dynamo, and why
//
//   - Removing a block for a rank also removes that rank from the block's
//     descendants (counted in Counters.CascadeRemoved). Those entries could
//     never be part of a prefix match again; Dynamo keeps them in its lookup,
//     unreachable for scoring. A node left with no holders is unlinked, which
//     is Dynamo's cascade: under the invariant its subtree is already empty.
//     Blocks of one Removed batch are resolved before any is removed, so a
//     batch that lists a parent before its child does not report the child
//     as unknown.
//   - A rank stores the same content under the same parent with a new
//     engine hash: the node is re-keyed to the new hash (latest wins,
//     Counters.Rekeyed); the old hash is forgotten and a later removal of it
//     counts as unknown. Dynamo points both hashes at the node, and removing
//     either one drops the rank from it while the other still names it.
//   - An engine hash the rank already uses for a different node is moved:
//     the old node (and the rank's blocks below it) is dropped for that rank
//     first (Counters.Moved). Engines that name blocks by reusable ids would
//     otherwise be stuck after one missed Removed event. When the old node is
//     the new block's own parent or an ancestor of it, the chain would close
//     a loop; the rest of the event is rejected with ErrInvalidBlockSequence.
//     A Stored event that repeats an engine hash within itself, or reuses its
//     parent's, is rejected whole before anything is applied.
//   - FindMatches reports every rank's true matched depth, also with
//     earlyExit. Dynamo's early exit truncates the last survivor's score to
//     the depth at which it became the only one.
//   - OverlapScores.TreeSizes lists only ranks that matched at least one
//     block; [Tree.WorkerBlockCounts] lists every rank.
//   - Lower tiers are independent trees: an engine must publish a block's
//     parent chain in the same tier for the block to be found there.
package index
