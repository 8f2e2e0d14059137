package messages

// Priorities for the shard and scheduler mailboxes (0..7, default 4;
// actors.priorityMailbox honours them for requests too, which protoactor's
// own priority mailbox does not). A score query must not wait behind a
// backlog of KV events in a shard's mailbox — it reads the index as it
// is, as Dynamo's concurrent readers do — and replies to decisions already
// in flight go before new decisions, so a burst of requests cannot starve
// the ones started.

// GetPriority lets a ScoreRequest overtake queued KV events.
func (*ScoreRequest) GetPriority() int8 { return 7 }

// GetPriority keeps a routing decision's prediction in the score lane: the
// scheduler sends both, and the next score must see the prediction of the
// decision made before it (predict-on-route), not overtake it.
func (*RoutingDecision) GetPriority() int8 { return 7 }

// GetPriority lets shard replies overtake new route requests.
func (*OverlapReply) GetPriority() int8 { return 6 }

// GetPriority lets load replies overtake new route requests.
func (*LoadReply) GetPriority() int8 { return 6 }

// GetPriority lets a rank's published load overtake new route requests,
// like a load reply: a decision started after a change should see it.
func (*RankLoad) GetPriority() int8 { return 6 }
