package mockengine

import (
	"net/http"
	"sync/atomic"
)

// Dying engines. A killed engine process drops its connections: a
// client reading a stream sees it end without [DONE], one waiting for a
// unary answer sees the connection close with no answer. These faults do
// that to the HTTP answers while the rest of the worker runs, so tests
// can kill an engine mid-stream and check what a router does about it.
type dropFaults struct {
	// dead: every answer's connection is dropped, open streams at their
	// next token, new requests before any answer.
	dead atomic.Bool
	// afterTokens > 0: every answer's connection is dropped once it has
	// generated that many tokens (streams have sent them).
	afterTokens atomic.Int64
}

// SetDead drops every answer's connection (true), as a killed engine
// does, or serves again (false).
func (s *Server) SetDead(dead bool) { s.faults.drop.dead.Store(dead) }

// SetDropAfterTokens drops the connection of every answer that has
// generated n tokens (0: never).
func (s *Server) SetDropAfterTokens(n int) { s.faults.drop.afterTokens.Store(int64(max(n, 0))) }

// dropNow ends the handler by dropping its connection if a fault says
// so, for an answer that has generated tokens so far. net/http closes
// the connection on ErrAbortHandler without writing anything more (a
// chunked stream is left unterminated) and without logging.
func (f *dropFaults) dropNow(generated int) {
	n := f.afterTokens.Load()
	if f.dead.Load() || (n > 0 && int64(generated) >= n) {
		panic(http.ErrAbortHandler)
	}
}
