// Package zmqevents ingests KV-cache events the way vLLM and SGLang
// publish them: 3-frame ZeroMQ messages [topic, seq, msgpack EventBatch]
// on a PUB socket, with a ROUTER socket that replays recent batches.
//
// The package has a pure half and an I/O half:
//
//   - DecodeMessage/DecodeBatch turn frames into raw engine events, accepting
//     both the array and the map encoding at both levels (vLLM switched the
//     inner events to maps in #42892; the outer batch may follow).
//   - Converter turns raw events into kv.Event. The router never trusts the
//     engine's block hashes as content hashes: it hashes token_ids itself
//     (hashing.BlockHashes, with the LoRA name and per-block extra keys), so
//     PYTHONHASHSEED and --prefix-caching-hash-algo do not matter. The engine
//     hash survives only as the per-worker key (kv.ExternalBlockHash) used
//     to find a block again on removal and to find a stored chain's parent.
//   - What cannot be indexed is skipped one event at a time, never a whole
//     batch: an unknown event type or medium, a block size other than the
//     router's, SGLang's short last page. Each skip is counted by Reason,
//     reported to Options.OnDrop and logged at WARN (rate-limited per
//     reason) with the worker, the rank and what to fix.
//   - RefCounter sits in front of the index: engines with several KV cache
//     groups store the same hash more than once, and only the last removal
//     of a hash may evict it.
//   - Subscriber and Manager own the sockets: one SUB per data-parallel rank
//     (vLLM offsets the port by the rank), sequence tracking, replay over a
//     DEALER on gaps, and restart detection when the sequence goes back;
//     all of it per rank: one rank's restart clears and replays that rank
//     only.
//
// # Joining mid-stream
//
// A router that connects after an engine has been running misses the
// stores made before it. A Subscriber asks for a replay from sequence 0
// once on first connect, so it catches up fully while the engine's replay
// buffer (vLLM: 10 000 batches) still holds the start. When it does not,
// a BlockStored whose parent the index never saw is rejected by the index
// with a counted ErrParentNotFound: those blocks cannot be placed in the
// prefix tree without their prefix, and the worker's cache is under-credited
// until the blocks are stored again. Engine snapshots (vLLM PR #50134) would
// close that hole.
package zmqevents
