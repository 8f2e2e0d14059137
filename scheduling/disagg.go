package scheduling

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/kv"
)

// Phase is which part of a request a cost prices.
type Phase uint8

const (
	// PhaseAggregated: the whole request on one rank, Dynamo's
	// worker_logit (prefill left after cache credit + decode load).
	PhaseAggregated Phase = iota
	// PhasePrefill: a prefill-pool rank computes the prompt and hands its
	// blocks on; it never decodes, so only the prefill term counts:
	// prefill_load_scale · max(raw_prefill − credit, 0). With
	// --router-cost ttft the predicted time to first token is the cost.
	PhasePrefill
	// PhaseDecode: a decode-pool rank receives the prompt's blocks and
	// generates. Dynamo's decode router (worker_type "decode", prefill
	// tracking off): max(0, decode_blocks − credit) + w · active_requests,
	// so blocks the rank already holds need not be transferred.
	PhaseDecode
)

// prefillLogit is the PhasePrefill cost.
func (cc *costContext) prefillLogit(c *Candidate) float64 {
	rawPrefill, credit := cc.prefillTerms(c)
	return cc.cfg.PrefillLoadScale * max(rawPrefill-credit, 0)
}

// decodeLogit is the PhaseDecode cost: the rank's decode blocks with
// this request, less the blocks of its prefix it already caches (the
// credit, as the prefill cost counts it, undecayed: the decode router
// tracks no prefill), plus the per-request weight.
func (cc *costContext) decodeLogit(c *Candidate) float64 {
	decode := float64(c.NewBlocks)
	requests := 0.0
	if c.HasLoad {
		decode += c.ActiveBlocks
		requests = float64(c.ActiveRequests)
	}
	return max(decode-cc.credit(c, 1), 0) + cc.cfg.DecodeActiveRequestWeight*requests
}

// DisaggDecision is a decision in a fleet with prefill and decode pools.
type DisaggDecision struct {
	// Decode is the rank that generates; it also prefills when Prefill is
	// nil (the local path).
	Decode Decision
	// Prefill is the rank that computes the prompt and hands its blocks
	// to Decode; nil when the request is prefilled locally.
	Prefill *Decision
	// Uncached is the prompt tokens Decode does not cache, what
	// MaxLocalPrefillLength is compared with.
	Uncached uint64
	// Why says which path was taken and why (for logs and metrics):
	// "remote", "short_prompt", "no_prefill_worker", "same_rank".
	Why string
}

// SelectDisaggregated makes one decision for a disaggregated fleet:
//
//  1. the decode rank, over the ranks whose role decodes (decode, both),
//     with the PhaseDecode cost;
//  2. conditional disaggregation (Dynamo's disagg router): when the
//     prompt tokens the decode rank does not cache are at most
//     cfg.MaxLocalPrefillLength, the decode rank prefills them itself
//     (no transfer; its own cache makes a repeated prompt local);
//  3. otherwise the prefill rank, over the ranks whose role prefills
//     (prefill, both), with the PhasePrefill cost, KV-aware. A request
//     with no prefill rank left, or whose prefill rank is the decode rank
//     itself, is prefilled locally.
//
// role gives each candidate's role. Both selections validate like Select.
func SelectDisaggregated(cfg Config, blockSize, isl, requestBlocks int, cands []Candidate,
	role func(kv.WorkerWithDpRank) kv.Role, rng *rand.Rand) (DisaggDecision, error) {
	return SelectDisaggregatedBound(cfg, blockSize, isl, requestBlocks, cands, nil, role, rng)
}

// SelectDisaggregatedBound is SelectDisaggregated for a request whose
// sticky session is bound to the decode rank bound (nil: none): the decode
// side stays on it when it is a decode candidate (the caller has checked
// it is fit to stay, sessions.Stay), so the conversation's KV keeps
// landing on one decode worker; conditional disaggregation and the
// prefill rank are decided as usual. A bound rank that is not among the
// decode candidates is ignored.
func SelectDisaggregatedBound(cfg Config, blockSize, isl, requestBlocks int, cands []Candidate,
	bound *kv.WorkerWithDpRank, role func(kv.WorkerWithDpRank) kv.Role, rng *rand.Rand) (DisaggDecision, error) {
	if role == nil {
		return DisaggDecision{}, fmt.Errorf("select disaggregated: nil role function: %w", ErrInvalidInput)
	}
	decodePool := make([]Candidate, 0, len(cands))
	prefillPool := make([]Candidate, 0, len(cands))
	for _, c := range cands {
		r := role(c.Worker)
		if r.Decodes() {
			decodePool = append(decodePool, c)
		}
		if r.Prefills() {
			prefillPool = append(prefillPool, c)
		}
	}
	if len(decodePool) == 0 {
		return DisaggDecision{}, fmt.Errorf("select disaggregated: no decode worker among %d candidates: %w",
			len(cands), ErrNoEligibleWorker)
	}
	if bound != nil {
		for _, c := range decodePool {
			if c.Worker == *bound {
				decodePool = []Candidate{c}
				break
			}
		}
	}
	d, err := SelectPhase(PhaseDecode, cfg, blockSize, isl, requestBlocks, decodePool, rng)
	if err != nil {
		return DisaggDecision{}, fmt.Errorf("select decode worker: %w", err)
	}
	out := DisaggDecision{Decode: d, Uncached: uint64(isl) - min(d.CachedTokens, uint64(isl))}
	switch {
	case out.Uncached <= cfg.MaxLocalPrefillLength:
		out.Why = "short_prompt"
		return out, nil
	case len(prefillPool) == 0:
		out.Why = "no_prefill_worker"
		return out, nil
	}
	p, err := SelectPhase(PhasePrefill, cfg, blockSize, isl, requestBlocks, prefillPool, rng)
	if err != nil {
		return DisaggDecision{}, fmt.Errorf("select prefill worker: %w", err)
	}
	if p.Worker == d.Worker {
		out.Why = "same_rank"
		return out, nil
	}
	out.Prefill, out.Why = &p, "remote"
	return out, nil
}

// PrefillRequestID is the id the prefill hop of a disaggregated request
// is tracked under: the request's own id with a suffix no client id of
// the same request can collide with in the scheduler's table (the
// client's ids are checked against it when routed).
func PrefillRequestID(requestID string) string { return requestID + PrefillRequestSuffix }

// PrefillRequestSuffix marks a prefill hop's request id.
const PrefillRequestSuffix = "#prefill"
