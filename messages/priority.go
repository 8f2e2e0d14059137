package messages

// Priorities for protoactor's priority mailboxes (0..7, default 4). A
// score query must not wait behind a backlog of KV events in a shard's
// mailbox — it reads the index as it is, as Dynamo's concurrent readers
// do — and replies to decisions already in flight go before new
// decisions, so a burst of requests cannot starve the ones started.

// GetPriority lets a ScoreRequest overtake queued KV events.
func (*ScoreRequest) GetPriority() int8 { return 7 }

// GetPriority lets shard replies overtake new route requests.
func (*OverlapReply) GetPriority() int8 { return 6 }

// GetPriority lets load replies overtake new route requests.
func (*LoadReply) GetPriority() int8 { return 6 }
