package httpapi

import (
	"net/http"
	"strconv"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/netpolicy"
	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// listWorkers is GET /workers. ?digest=1 adds the index digest, which
// walks the whole index (actors.Router.Status).
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) {
	digest := false
	if v := r.URL.Query().Get("digest"); v != "" {
		var err error
		if digest, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, "digest must be a boolean (1, true, 0, false), got %q", v)
			return
		}
	}
	st, err := s.opts.Router.Status(r.Context(), digest)
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	if s.parity == nil {
		writeJSON(w, http.StatusOK, st)
		return
	}
	ps := s.parity.tracker.Status()
	writeJSON(w, http.StatusOK, struct {
		*actors.Status
		Parity *parity.Status `json:"parity"`
	}{st, &ps})
}

// AddWorkerBody is POST /workers: a static registration for setups
// without heartbeats. It does not expire; DELETE /workers/{id} removes it.
type AddWorkerBody struct {
	WorkerID              *uint64 `json:"worker_id"`
	URL                   string  `json:"url"`
	DataParallelStartRank uint32  `json:"data_parallel_start_rank"`
	DataParallelSize      *uint32 `json:"data_parallel_size"`
	TotalKVBlocks         uint64  `json:"total_kv_blocks"`
	BlockSize             uint32  `json:"block_size"`
	ModelName             string  `json:"model_name"`
	MaxNumBatchedTokens   uint64  `json:"max_num_batched_tokens"`
	// Role is "prefill", "decode" or "both" (default).
	Role string `json:"role"`
	// KVEventsEndpoint is rank 0's ZMQ PUB address of an engine that
	// publishes KV events in vLLM's or SGLang's wire format
	// (tcp://host:port; rank i publishes on port + i). The router
	// subscribes as it does for a heartbeat that announces one, the
	// ranks numbered from data_parallel_start_rank. ReplayEndpoint is
	// rank 0's replay ROUTER (optional).
	KVEventsEndpoint string `json:"kv_events_endpoint"`
	ReplayEndpoint   string `json:"replay_endpoint"`
}

// maxDpSize bounds a registration so a typo cannot spawn a million actors.
const maxDpSize = 1024

func (s *Server) addWorker(w http.ResponseWriter, r *http.Request) {
	var body AddWorkerBody
	if !s.decodeJSON(w, r, jsonBody{endpoint: "workers", dst: &body}) {
		return
	}
	if body.WorkerID == nil {
		writeError(w, http.StatusBadRequest, "worker_id is required")
		return
	}
	size := uint32(1)
	if body.DataParallelSize != nil {
		size = *body.DataParallelSize
	}
	if size == 0 || size > maxDpSize {
		writeError(w, http.StatusBadRequest, "data_parallel_size must be in 1..%d, got %d", maxDpSize, size)
		return
	}
	if uint64(body.DataParallelStartRank)+uint64(size) > 1<<32 {
		writeError(w, http.StatusBadRequest, "data_parallel_start_rank %d + data_parallel_size %d: ranks past 2^32-1 do not fit in uint32",
			body.DataParallelStartRank, size)
		return
	}
	role, err := kv.ParseRole(body.Role)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := s.opts.WorkerPolicy.CheckWorkerURL(r.Context(), body.URL, s.opts.Resolve); err != nil {
		if s.opts.Metrics != nil {
			s.opts.Metrics.WorkerRejected("url_" + netpolicy.Reason(err))
		}
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if body.BlockSize != 0 && int(body.BlockSize) != s.opts.BlockSize {
		if s.opts.Metrics != nil {
			s.opts.Metrics.WorkerRejected("block_size_mismatch")
		}
		writeError(w, http.StatusBadRequest, "worker block_size %d differs from the router's %d", body.BlockSize, s.opts.BlockSize)
		return
	}
	events, ok := s.kvEventsEndpoint(w, r, &body, size)
	if !ok {
		return
	}
	err = s.opts.Router.RegisterWorker(&messages.WorkerHeartbeat{
		WorkerId: *body.WorkerID, Url: body.URL, DataParallelStartRank: body.DataParallelStartRank,
		DataParallelSize: size, TotalKvBlocks: body.TotalKVBlocks, BlockSize: uint32(s.opts.BlockSize),
		ModelName: body.ModelName, MaxNumBatchedTokens: body.MaxNumBatchedTokens, Role: messages.WorkerRole(role),
	}, true)
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	s.forgetURLs()
	reply := map[string]any{"worker_id": *body.WorkerID, "registered": true}
	if events != nil {
		if err := s.opts.SubscribeKVEvents(*events); err != nil {
			s.opts.Router.RemoveWorker(kv.WorkerID(*body.WorkerID))
			s.forgetURLs()
			writeError(w, http.StatusServiceUnavailable, "worker not registered: cannot subscribe to its KV events: %v", err)
			return
		}
		reply["kv_events_endpoint"] = events.Endpoint
	}
	writeJSON(w, http.StatusOK, reply)
}

// kvEventsEndpoint checks a registration's ZMQ endpoints as a heartbeat's
// are checked (the worker-address policy, every rank's port) and returns
// the subscription to start, nil when the body names none. It answers
// the client itself (400) on refusal.
func (s *Server) kvEventsEndpoint(w http.ResponseWriter, r *http.Request, body *AddWorkerBody, size uint32) (*zmqevents.WorkerEndpoint, bool) {
	if body.KVEventsEndpoint == "" {
		if body.ReplayEndpoint != "" {
			writeError(w, http.StatusBadRequest, "replay_endpoint needs kv_events_endpoint")
			return nil, false
		}
		return nil, true
	}
	if s.opts.SubscribeKVEvents == nil {
		writeError(w, http.StatusBadRequest, "kv_events_endpoint: this router does not ingest ZMQ KV events (--zmq-events)")
		return nil, false
	}
	for _, ep := range []struct{ field, value string }{{"kv_events_endpoint", body.KVEventsEndpoint}, {"replay_endpoint", body.ReplayEndpoint}} {
		if err := s.opts.WorkerPolicy.CheckZMQEndpoint(r.Context(), ep.value, int(size), s.opts.Resolve); err != nil {
			if s.opts.Metrics != nil {
				s.opts.Metrics.WorkerRejected("zmq_endpoint_" + netpolicy.Reason(err))
			}
			writeError(w, http.StatusBadRequest, "%s: %v", ep.field, err)
			return nil, false
		}
	}
	ep := &zmqevents.WorkerEndpoint{WorkerID: kv.WorkerID(*body.WorkerID), Endpoint: body.KVEventsEndpoint,
		ReplayEndpoint: body.ReplayEndpoint, DPSize: int(size), DPStartRank: body.DataParallelStartRank}
	if err := ep.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "kv_events_endpoint: %v", err)
		return nil, false
	}
	return ep, true
}

func (s *Server) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id, err := parseUint(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "worker id %q is not an unsigned integer", r.PathValue("id"))
		return
	}
	st, err := s.opts.Router.Registry(r.Context())
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	found := false
	for _, wk := range st.Workers {
		found = found || wk.Worker.WorkerId == id
	}
	if !found {
		writeError(w, http.StatusNotFound, "worker %d is not registered", id)
		return
	}
	s.opts.Router.RemoveWorker(kv.WorkerID(id))
	s.forgetURLs()
	writeJSON(w, http.StatusOK, map[string]any{"worker_id": id, "removed": true})
}
