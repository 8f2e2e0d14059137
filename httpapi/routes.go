package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/routeapi"
)

// WorkerRef names a worker rank in JSON.
type WorkerRef struct {
	WorkerID uint64 `json:"worker_id"`
	DpRank   uint32 `json:"dp_rank"`
}

// ConfigOverride is router_config_override (Dynamo's names).
type ConfigOverride struct {
	OverlapScoreWeight *float64 `json:"overlap_score_weight"`
	RouterTemperature  *float64 `json:"router_temperature"`
	OverlapScoreCredit *float64 `json:"overlap_score_credit"`
	PrefillLoadScale   *float64 `json:"prefill_load_scale"`
	TrackPrefillTokens *bool    `json:"track_prefill_tokens"`
	AssumeKVReuse      *bool    `json:"assume_kv_reuse"`
	// SharedCacheMultiplier is Dynamo's RouterConfigOverride
	// shared_cache_multiplier.
	SharedCacheMultiplier *float64 `json:"shared_cache_multiplier"`
}

// RouteBody is POST /route.
type RouteBody struct {
	RequestID            string          `json:"request_id"`
	TokenIDs             *TokenIDs       `json:"token_ids"`
	LoraName             string          `json:"lora_name"`
	UpdateStates         *bool           `json:"update_states"`
	PinnedWorker         *WorkerRef      `json:"pinned_worker"`
	AllowedWorkerIDs     []uint64        `json:"allowed_worker_ids"`
	ExpectedOutputTokens uint64          `json:"expected_output_tokens"`
	PriorityJump         float64         `json:"priority_jump"`
	RouterConfigOverride *ConfigOverride `json:"router_config_override"`
	// Explain asks for the decision's route receipt (as the
	// x-kvrouter-explain: 1 header does).
	Explain bool `json:"explain"`
	// In place of token_ids: a text prompt or chat messages, tokenized
	// with the model's tokenizer (see textInput).
	textInput
}

// RouteResult is the answer to POST /route.
type RouteResult struct {
	RequestID     string `json:"request_id,omitempty"`
	WorkerID      uint64 `json:"worker_id"`
	DpRank        uint32 `json:"dp_rank"`
	OverlapBlocks uint32 `json:"overlap_blocks"`
	CachedTokens  uint64 `json:"cached_tokens"`
	// PromptTokens is the prompt's length in tokens when the router
	// tokenized it (text or messages).
	PromptTokens int `json:"prompt_tokens,omitempty"`
	// IndexTrust is the chosen rank's index trust: exact, degraded, or
	// untrusted (its overlap came from predicted blocks); docs/index-trust.md.
	IndexTrust string `json:"index_trust"`
	// In a disaggregated fleet, when the prompt is prefilled remotely:
	// the prefill rank (worker_id/dp_rank above is the decode rank), its
	// cached prefix, and the id its hop is tracked under (free it with
	// POST /free when the prefill answer arrives; freeing request_id
	// frees both). Absent in aggregated fleets and on the local path.
	PrefillWorkerID      *uint64 `json:"prefill_worker_id,omitempty"`
	PrefillDpRank        *uint32 `json:"prefill_dp_rank,omitempty"`
	PrefillOverlapBlocks uint32  `json:"prefill_overlap_blocks,omitempty"`
	PrefillCachedTokens  uint64  `json:"prefill_cached_tokens,omitempty"`
	PrefillRequestID     string  `json:"prefill_request_id,omitempty"`
	// Receipt is the decision's route receipt (docs/receipts.md), when
	// the request asked for it.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

func (b *RouteBody) toMessage() (*messages.RouteRequest, error) {
	r := routeapi.Route{
		RequestID: b.RequestID, HasTokens: b.TokenIDs != nil, LoraName: b.LoraName, UpdateStates: b.UpdateStates,
		AllowedWorkerIDs: b.AllowedWorkerIDs, ExpectedOutputTokens: b.ExpectedOutputTokens, PriorityJump: b.PriorityJump,
		Model: b.Model, Explain: b.Explain,
	}
	if b.TokenIDs != nil {
		r.Tokens = *b.TokenIDs
	}
	if b.PinnedWorker != nil {
		r.Pinned = &messages.WorkerRank{WorkerId: b.PinnedWorker.WorkerID, DpRank: b.PinnedWorker.DpRank}
	}
	if o := b.RouterConfigOverride; o != nil {
		r.Override = &messages.RouterConfigOverride{
			OverlapScoreWeight: o.OverlapScoreWeight, RouterTemperature: o.RouterTemperature,
			OverlapScoreCredit: o.OverlapScoreCredit, PrefillLoadScale: o.PrefillLoadScale,
			TrackPrefillTokens: o.TrackPrefillTokens, AssumeKvReuse: o.AssumeKVReuse,
			SharedCacheMultiplier: o.SharedCacheMultiplier,
		}
	}
	return routeapi.RouteMessage(r)
}

// maxScratchTokens keeps one huge prompt from pinning a huge buffer.
const maxScratchTokens = 1 << 17

// routeScratch holds a route request's body and token buffers between
// requests: prompts are tens of kilobytes, and allocating them afresh per
// decision was most of the router's garbage.
type routeScratch struct {
	body   []byte
	tokens TokenIDs
}

var routeScratchPool = sync.Pool{New: func() any { return &routeScratch{} }}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	sc := routeScratchPool.Get().(*routeScratch)
	var body RouteBody
	body.TokenIDs = &sc.tokens
	if !s.decodeJSON(w, r, jsonBody{endpoint: "route", dst: &body, buf: &sc.body, tokens: &body.TokenIDs, extra: s.opts.SessionBodyField}) {
		return
	}
	promptTokens, ok := s.textTokens(w, r, &body.textInput, &body.TokenIDs, &body.LoraName)
	if !ok {
		return
	}
	body.Explain = body.Explain || explainAsked(r.Header)
	msg, err := body.toMessage()
	if err == nil {
		msg.SessionId, err = s.sessionID(r.Header, sc.body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	reply, err := s.opts.Router.Route(r.Context(), msg)
	if err != nil {
		// The scheduler may still hold the tokens (a timed-out decision
		// finishes later): the buffers are not recycled.
		s.writeRouterError(w, err)
		return
	}
	// The scheduler replied, so it is done with the request's tokens.
	if body.TokenIDs != nil && cap(*body.TokenIDs) <= maxScratchTokens && cap(sc.body) <= 8*maxScratchTokens {
		sc.tokens = (*body.TokenIDs)[:0]
		routeScratchPool.Put(sc)
	}
	res := RouteResult{
		WorkerID: reply.Worker.GetWorkerId(), DpRank: reply.Worker.GetDpRank(),
		OverlapBlocks: reply.OverlapBlocks, CachedTokens: reply.CachedTokens, PromptTokens: promptTokens,
		IndexTrust: s.indexTrust(reply.Worker), Receipt: reply.ReceiptJson,
	}
	if pw := reply.PrefillWorker; pw != nil {
		id, rank := pw.WorkerId, pw.DpRank
		res.PrefillWorkerID, res.PrefillDpRank = &id, &rank
		res.PrefillOverlapBlocks, res.PrefillCachedTokens = reply.PrefillOverlapBlocks, reply.PrefillCachedTokens
	}
	if msg.UpdateStates {
		res.RequestID = msg.RequestId
		if reply.PrefillWorker != nil {
			res.PrefillRequestID = reply.PrefillRequestId
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// ExplainHeader asks for a decision's route receipt: on /route's
// answer, and kept in the replica's ring for a proxied request (whose
// answer then names it in DecisionHeader).
const (
	ExplainHeader  = "x-kvrouter-explain"
	DecisionHeader = "X-Kvrouter-Decision"
)

// explainAsked reports whether the request carries x-kvrouter-explain: 1
// (or true).
func explainAsked(h http.Header) bool {
	v := h.Get(ExplainHeader)
	return v == "1" || v == "true"
}

// decision answers GET /decisions/{request_id}: the route receipt the
// replica kept for the request (docs/receipts.md), 404 when it is not
// (or no longer) in the ring.
func (s *Server) decision(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("request_id")
	if err := routeapi.CheckRequestID(id); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	data, ok := s.opts.Router.Decision(id)
	if !ok {
		writeError(w, http.StatusNotFound, "no route receipt kept for request %q (explained or sampled decisions only, while the ring holds them)", id)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// writeRouterError answers a router error with routeapi's status and
// message (the gRPC API sends the same message).
func (s *Server) writeRouterError(w http.ResponseWriter, err error) {
	f := s.routerFailure(err)
	writeJSON(w, f.Status, f.Body)
}

type requestIDBody struct {
	RequestID string `json:"request_id"`
}

func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, endpoint string, call func(context.Context, string) error) {
	var body requestIDBody
	if !s.decodeJSON(w, r, jsonBody{endpoint: endpoint, dst: &body}) {
		return
	}
	if err := routeapi.CheckRequestID(body.RequestID); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := call(r.Context(), body.RequestID); err != nil {
		s.writeRouterError(w, err)
		return
	}
	// Acknowledged only once the step's gossip left for every peer: a
	// replica that dies after the answer cannot take it along. A peer
	// too slow to take it is counted and logged by the cluster; the step
	// is done here either way.
	_ = s.opts.Router.Gossiped(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"request_id": body.RequestID, "ok": true})
}

func (s *Server) prefillDone(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, "prefill_done", s.opts.Router.MarkPrefillCompleted)
}

func (s *Server) free(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, "free", s.opts.Router.Free)
}

type tokensBody struct {
	TokenIDs *TokenIDs `json:"token_ids"`
	LoraName string    `json:"lora_name"`
	textInput
	promptTokens int
}

func (s *Server) decodeTokens(w http.ResponseWriter, r *http.Request, endpoint string) (tokensBody, bool) {
	var body tokensBody
	if !s.decodeJSON(w, r, jsonBody{endpoint: endpoint, dst: &body, tokens: &body.TokenIDs}) {
		return body, false
	}
	var ok bool
	if body.promptTokens, ok = s.textTokens(w, r, &body.textInput, &body.TokenIDs, &body.LoraName); !ok {
		return body, false
	}
	var tokens []uint32
	if body.TokenIDs != nil {
		tokens = *body.TokenIDs
	}
	if err := routeapi.CheckQueryTokens(tokens); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return body, false
	}
	return body, true
}

// OverlapRow is one worker rank's row of POST /overlap_scores.
type OverlapRow struct {
	WorkerID     uint64  `json:"worker_id"`
	DpRank       uint32  `json:"dp_rank"`
	DeviceBlocks uint32  `json:"device_blocks"`
	HostBlocks   uint32  `json:"host_blocks"`
	DiskBlocks   uint32  `json:"disk_blocks"`
	Credit       float64 `json:"credit"`
	CachedTokens uint64  `json:"cached_tokens"`
	TreeSize     uint64  `json:"tree_size"`
	// SharedBeyondDeviceBlocks is the prompt's shared-tier prefix beyond
	// this rank's device prefix, SharedCreditBlocks what the cost credits
	// for it (× shared_cache_multiplier): Dynamo's
	// shared_beyond_device_blocks and shared_credit_blocks.
	SharedBeyondDeviceBlocks uint32  `json:"shared_beyond_device_blocks"`
	SharedCreditBlocks       float64 `json:"shared_credit_blocks"`
}

func (s *Server) overlapScores(w http.ResponseWriter, r *http.Request) {
	body, ok := s.decodeTokens(w, r, "overlap_scores")
	if !ok {
		return
	}
	reply, err := s.opts.Router.OverlapScores(r.Context(), *body.TokenIDs, body.LoraName)
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	cfg := s.opts.Router.Config().Scheduling
	ranks := reply.GetRanks()
	rows := make([]OverlapRow, len(ranks.GetWorkerIds()))
	for i := range rows {
		device, host, disk := ranks.DeviceBlocks[i], ranks.HostBlocks[i], ranks.DiskBlocks[i]
		c := routeapi.CreditOf(cfg, s.opts.BlockSize, device, host, disk, reply.SharedBlocks)
		rows[i] = OverlapRow{
			WorkerID: ranks.WorkerIds[i], DpRank: ranks.DpRanks[i],
			DeviceBlocks: device, HostBlocks: host, DiskBlocks: disk,
			Credit: c.Credit, CachedTokens: c.CachedTokens, TreeSize: ranks.TreeSizes[i],
			SharedBeyondDeviceBlocks: c.SharedBeyondDeviceBlocks, SharedCreditBlocks: c.SharedCreditBlocks,
		}
	}
	res := map[string]any{"request_blocks": reply.RequestBlocks, "shared_blocks": reply.SharedBlocks, "scores": rows}
	if body.promptTokens > 0 {
		res["prompt_tokens"] = body.promptTokens
	}
	writeJSON(w, http.StatusOK, res)
}

// LoadRow is one worker rank's row of POST /potential_loads.
type LoadRow struct {
	WorkerID               uint64  `json:"worker_id"`
	DpRank                 uint32  `json:"dp_rank"`
	PotentialPrefillTokens uint64  `json:"potential_prefill_tokens"`
	PotentialDecodeBlocks  float64 `json:"potential_decode_blocks"`
	ActiveRequests         uint32  `json:"active_requests"`
}

func (s *Server) potentialLoads(w http.ResponseWriter, r *http.Request) {
	body, ok := s.decodeTokens(w, r, "potential_loads")
	if !ok {
		return
	}
	reply, err := s.opts.Router.PotentialLoads(r.Context(), *body.TokenIDs, body.LoraName)
	if err != nil {
		s.writeRouterError(w, err)
		return
	}
	rows := make([]LoadRow, 0, len(reply.Loads))
	for _, l := range reply.Loads {
		rows = append(rows, LoadRow{
			WorkerID: l.Worker.GetWorkerId(), DpRank: l.Worker.GetDpRank(),
			PotentialPrefillTokens: l.PotentialPrefillTokens, PotentialDecodeBlocks: l.PotentialDecodeBlocks,
			ActiveRequests: l.ActiveRequests,
		})
	}
	res := map[string]any{"loads": rows}
	if body.promptTokens > 0 {
		res["prompt_tokens"] = body.promptTokens
	}
	writeJSON(w, http.StatusOK, res)
}
