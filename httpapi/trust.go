package httpapi

import (
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// IndexTrustHeader names, on a proxied answer, the index trust of the
// rank that served it (exact, degraded, untrusted; docs/index-trust.md).
const IndexTrustHeader = "X-Kvrouter-Index-Trust"

// indexTrust is the chosen rank's index trust as last published.
func (s *Server) indexTrust(w *messages.WorkerRank) string {
	return s.opts.Router.IndexTrust(kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w.GetWorkerId()), DpRank: w.GetDpRank()}).State
}
