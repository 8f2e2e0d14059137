package scheduling

// Terms are the parts of one candidate's cost, for a route receipt: what
// each formula adds up (the fields of the other formula are 0).
type Terms struct {
	// Dynamo's cost (logit), in blocks: the prompt's prefill with the
	// rank's queue, the cache credit against it, the prefill left after
	// it (× prefill_load_scale, as it enters the cost), the decode
	// blocks, and the active requests (× decode_active_request_weight).
	RawPrefillBlocks float64 `json:"raw_prefill_blocks,omitempty"`
	CreditBlocks     float64 `json:"credit_blocks,omitempty"`
	PrefillLoad      float64 `json:"prefill_load,omitempty"`
	DecodeLoad       float64 `json:"decode_load,omitempty"`
	RequestLoad      float64 `json:"request_load,omitempty"`
	// The ttft cost (TTFTCost), in tokens and tokens per second: the
	// prefill queued ahead, the request's uncached tokens, the blocks
	// over the KV headroom, and the prefill rate they are divided by.
	QueuedTokens   float64 `json:"queued_tokens,omitempty"`
	UncachedTokens float64 `json:"uncached_tokens,omitempty"`
	OverKVBlocks   float64 `json:"over_kv_blocks,omitempty"`
	Rate           float64 `json:"rate,omitempty"`
}

// ExplainPhase returns each candidate's Terms under phase, as ScorePhase
// prices them (only on request: it repeats the scoring's arithmetic).
func ExplainPhase(phase Phase, cfg Config, blockSize, isl, requestBlocks int, cands []Candidate) ([]Terms, error) {
	cc, err := preparePhase(phase, cfg, blockSize, isl, requestBlocks, cands)
	if err != nil {
		return nil, err
	}
	out := make([]Terms, len(cands))
	for i := range cands {
		c, t := &cands[i], &out[i]
		if cc.cfg.RouterCost == CostTTFT && phase != PhaseDecode {
			t.QueuedTokens, t.UncachedTokens, t.OverKVBlocks = ttftTerms(&cc.cfg, blockSize, isl, c, cc.rates[i])
			t.Rate = cc.rates[i]
			continue
		}
		raw, credit := cc.prefillTerms(c)
		t.RawPrefillBlocks, t.CreditBlocks = raw, credit
		adjusted, decode, requests := cc.logitTerms(c)
		t.PrefillLoad = cc.cfg.PrefillLoadScale * adjusted
		t.DecodeLoad, t.RequestLoad = decode, cc.cfg.DecodeActiveRequestWeight*requests
		if phase == PhaseDecode {
			t.CreditBlocks, t.RawPrefillBlocks, t.PrefillLoad = cc.credit(c, 1), 0, 0
		}
		if phase == PhasePrefill {
			t.DecodeLoad, t.RequestLoad = 0, 0
		}
	}
	return out, nil
}
