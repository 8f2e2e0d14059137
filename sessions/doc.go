// Package sessions is the sticky-session table: session id → the
// (worker, dp_rank) its requests go to, as Dynamo's StickySessionRouter
// keeps it, made into cluster state.
//
// The first request of a session is routed normally and then bound; later
// requests go to the bound rank while the session lives (an idle TTL
// counted from its last use, or until an explicit end) unless that rank is
// gone or over the busy threshold (Stay), in which case the request is
// routed normally and the session moves.
//
// Every replica holds the whole table. Each write (bind, move, end) carries
// a Version: the writer's clock in nanoseconds, raised above the version it
// replaces, with the writer's replica id as the tiebreak. Replicas apply
// writes last-writer-wins (Table.Apply), so they converge whatever order
// the writes arrive in; an end is a tombstone that outlives the session by
// one TTL so a late, older bind cannot bring the session back. The table's
// Digest (count and an order-independent hash of every entry's id,
// binding and version) lets replicas detect divergence and merge each
// other's snapshots (anti-entropy).
//
// The table is bounded: at most MaxSessions entries; a new one beyond
// that evicts the least recently used (counted), so a client sending
// endless fresh session ids costs a bounded table, not memory.
//
// The package is pure: no goroutines, no clock (times are passed in) and
// no locks; one actor owns a Table.
package sessions
