package httpapi

import (
	"net/http"

	"github.com/kvrouter/kvrouter/connguard"
)

// passGate runs a route's gate and tells the connection (connguard, when
// the listener is guarded) how it went: a request that passes marks the
// connection authenticated (the unauthenticated idle limit stops
// applying); one that fails is counted and its connection closed after
// the answer (closeAfterReply), so a client cannot hold a slot by
// failing the token check on a keep-alive connection.
func passGate(gate func(http.ResponseWriter, *http.Request) bool, w http.ResponseWriter, r *http.Request) bool {
	ok := gate(w, r)
	if c := connguard.FromContext(r.Context()); c != nil {
		if ok {
			c.MarkAuthenticated()
		} else {
			c.AuthFailed(false) // net/http closes it after the answer
		}
	}
	return ok
}

// closeAfterReply makes net/http close the connection once the answer is
// written, without reading the rest of the request body.
func closeAfterReply(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}
