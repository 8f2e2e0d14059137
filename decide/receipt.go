package decide

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// Receipt says why a decision went where it went: every candidate with
// its cost and the cost's terms, the winner's margin over the runner-up,
// the ties and random draws, the session rule applied, and how old each
// signal was. It is built only when a decision is asked for one
// (Decide.Explain); durations are nanoseconds in JSON.
type Receipt struct {
	RequestID   string  `json:"request_id,omitempty"`
	AtUnixNano  int64   `json:"at_unix_nano"`
	Cost        string  `json:"cost"`
	Temperature float64 `json:"temperature"`
	// Pipeline names the plugins that ran, in order.
	Pipeline   []string           `json:"pipeline"`
	Candidates []CandidateReceipt `json:"candidates"`
	Winner     string             `json:"winner,omitempty"`
	// Margin is the runner-up's cost minus the winner's (0 with one
	// candidate or a tie; negative when a temperature draw took a dearer
	// rank).
	Margin float64 `json:"margin"`
	// Close: the runner-up's cost was within noise of the best
	// (IsClose: within CloseMargin of the runner-up's cost, or a tie).
	Close bool `json:"close"`
	// Ties is how many candidates shared the lowest cost; Draws are the
	// random source's raw outputs this decision consumed (tie-breaks,
	// the temperature sample).
	Ties  int      `json:"ties"`
	Draws []uint64 `json:"draws,omitempty"`
	// Session is the session rule applied: "" (no session), "bind" (first
	// request), "stay" (kept on its rank), "move:REASON".
	Session    string        `json:"session,omitempty"`
	SessionAge time.Duration `json:"session_age,omitempty"`
	// OverlapAge is how long before the decision the index answered.
	OverlapAge time.Duration `json:"overlap_age"`
	// Disaggregation is the path of a disaggregated decision.
	Disaggregation string `json:"disaggregation,omitempty"`
	Prefill        string `json:"prefill,omitempty"`

	sig Signals
}

// CandidateReceipt is one candidate as the decision saw it.
type CandidateReceipt struct {
	Worker              string  `json:"worker"`
	DeviceOverlap       uint32  `json:"device_overlap"`
	HostOverlap         uint32  `json:"host_overlap,omitempty"`
	DiskOverlap         uint32  `json:"disk_overlap,omitempty"`
	SharedOverlap       uint32  `json:"shared_overlap,omitempty"`
	ActivePrefillTokens uint64  `json:"active_prefill_tokens"`
	ActiveBlocks        float64 `json:"active_blocks"`
	NewBlocks           uint64  `json:"new_blocks"`
	ActiveRequests      int     `json:"active_requests"`
	// Filtered: a filter left it out (it has no cost).
	Filtered bool             `json:"filtered,omitempty"`
	Cost     float64          `json:"cost"`
	Terms    scheduling.Terms `json:"terms"`
	// Scores are each scorer's own score, before its weight, when the
	// pipeline has several (cost is their weighted sum; terms explain
	// the cost scorer's).
	Scores map[string]float64 `json:"scores,omitempty"`
	// LoadSource is where its load came from: "reply" (asked for this
	// decision), "published" (the rank's last publication), "none".
	LoadSource string        `json:"load_source,omitempty"`
	LoadAge    time.Duration `json:"load_age"`
	// Phase is the pool a disaggregated decision priced it in: "decode"
	// (a rank that decodes) or "prefill".
	Phase string `json:"phase,omitempty"`
}

func newReceipt(now time.Time, m *messages.RouteRequest, p *Plan, sig Signals) *Receipt {
	r := &Receipt{RequestID: m.RequestId, AtUnixNano: now.UnixNano(), Cost: string(p.Config.RouterCost),
		Temperature: p.Config.RouterTemperature}
	if m.SessionId != "" {
		r.Session = "bind" // until fill reads the plan
		r.SessionAge = p.SessionAge
	}
	if sig != nil {
		if at := sig.OverlapAt(); at > 0 {
			r.OverlapAge = time.Duration(now.UnixNano() - at)
		}
	}
	r.sig = sig
	return r
}

// fill records the candidates (all of them; chosen are those the
// filters kept, scored as costs) and the pick.
func (r *Receipt) fill(c *Context, pipe Pipeline, all, chosen []scheduling.Candidate, costs []float64, pick int, draws *drawRecorder) {
	r.Pipeline = pipe.names()
	r.session(c.Plan)
	// The terms are those of the pipeline's cost scorer (the configured
	// cost, or the one a policy file names).
	costCfg := *c.Config
	for _, w := range pipe.Scorers {
		if f, ok := w.Scorer.(FixedCost); ok {
			costCfg.RouterCost = f.Model
			break
		}
	}
	r.Cost = string(costCfg.RouterCost)
	terms, _ := scheduling.ExplainPhase(scheduling.PhaseAggregated, costCfg, c.BlockSize, c.ISL, c.Blocks, chosen)
	// With several scorers, each one's own (unweighted) score.
	var parts [][]float64
	if len(pipe.Scorers) > 1 {
		for _, w := range pipe.Scorers {
			part, _ := w.Scorer.Score(c, chosen, nil)
			parts = append(parts, part)
		}
	}
	// chosen is all, or the ranks a filter kept in all's order.
	kept := make(map[int]int, len(chosen)) // index in all → index in chosen
	for i, j := 0, 0; i < len(all) && j < len(chosen); i++ {
		if all[i].Worker == chosen[j].Worker {
			kept[i] = j
			j++
		}
	}
	r.candidates(all)
	for i := range all {
		cr := &r.Candidates[i]
		j, ok := kept[i]
		if !ok {
			cr.Filtered = true
			continue
		}
		cr.Cost = costs[j]
		if j < len(terms) {
			cr.Terms = terms[j]
		}
		if parts != nil {
			cr.Scores = make(map[string]float64, len(parts))
			for k, w := range pipe.Scorers {
				if j < len(parts[k]) {
					cr.Scores[w.Scorer.Name()] = parts[k][j]
				}
			}
		}
	}
	r.Winner = chosen[pick].Worker.String()
	best, second := math.Inf(1), math.Inf(1)
	for _, v := range costs {
		switch {
		case v < best:
			best, second = v, best
		case v < second:
			second = v
		}
	}
	for _, v := range costs {
		if v == best {
			r.Ties++
		}
	}
	if !math.IsInf(second, 1) {
		r.Margin = second - costs[pick]
		if costs[pick] != best {
			r.Margin = best - costs[pick]
		}
	}
	if r.Ties > 1 {
		r.Margin = 0
	}
	if draws != nil {
		r.Draws = draws.draws
	}
}

// session records the session rule the plan applied.
func (r *Receipt) session(p *Plan) {
	switch {
	case r.Session == "" || !p.SessionBound:
	case p.HasSticky:
		r.Session = "stay"
	default:
		r.Session = "move:" + string(p.MoveReason)
	}
}

// candidates records every candidate as the decision saw it, with the
// source and age of its load.
func (r *Receipt) candidates(all []scheduling.Candidate) {
	r.Candidates = make([]CandidateReceipt, len(all))
	for i := range all {
		a := &all[i]
		cr := &r.Candidates[i]
		*cr = CandidateReceipt{Worker: a.Worker.String(), DeviceOverlap: a.DeviceOverlap, HostOverlap: a.HostOverlap,
			DiskOverlap: a.DiskOverlap, SharedOverlap: a.SharedOverlap, ActivePrefillTokens: a.ActivePrefillTokens,
			ActiveBlocks: a.ActiveBlocks, NewBlocks: a.NewBlocks, ActiveRequests: a.ActiveRequests}
		if r.sig != nil {
			src, at := r.sig.Load(a.Worker)
			cr.LoadSource = src
			if at > 0 {
				cr.LoadAge = time.Duration(r.AtUnixNano - at)
			}
		}
	}
}

// fillDisagg records a disaggregated decision's path and ranks, and every
// candidate with its cost and terms in the pool it was priced in
// (scheduling.SelectDisaggregatedBound): a rank that decodes in the
// decode phase, any other in the prefill phase.
func (r *Receipt) fillDisagg(c *Context, all []scheduling.Candidate, role func(kv.WorkerWithDpRank) kv.Role, dd scheduling.DisaggDecision) {
	r.Disaggregation = dd.Why
	r.Winner = dd.Decode.Worker.String()
	if dd.Prefill != nil {
		r.Prefill = dd.Prefill.Worker.String()
	}
	r.Pipeline = []string{"disaggregated"}
	r.session(c.Plan)
	r.candidates(all)
	var pools [2][]int // decode, prefill: indexes in all
	for i := range all {
		if role(all[i].Worker).Decodes() {
			pools[0] = append(pools[0], i)
		} else {
			pools[1] = append(pools[1], i)
		}
	}
	for k, phase := range [2]scheduling.Phase{scheduling.PhaseDecode, scheduling.PhasePrefill} {
		pool := make([]scheduling.Candidate, len(pools[k]))
		for j, i := range pools[k] {
			pool[j] = all[i]
		}
		costs, _ := scheduling.ScorePhase(phase, *c.Config, c.BlockSize, c.ISL, c.Blocks, pool, nil)
		terms, _ := scheduling.ExplainPhase(phase, *c.Config, c.BlockSize, c.ISL, c.Blocks, pool)
		for j, i := range pools[k] {
			cr := &r.Candidates[i]
			cr.Phase = [2]string{"decode", "prefill"}[k]
			if j < len(costs) {
				cr.Cost = costs[j]
			}
			if j < len(terms) {
				cr.Terms = terms[j]
			}
		}
	}
}

func (p Pipeline) names() []string {
	var out []string
	if p.Admitter != nil {
		out = append(out, "admit:"+p.Admitter.Name())
	}
	for _, f := range p.Filters {
		out = append(out, "filter:"+f.Name())
	}
	for _, s := range p.Scorers {
		name := "score:" + s.Scorer.Name()
		if s.Weight != 1 {
			name += "*" + strconv.FormatFloat(s.Weight, 'g', -1, 64)
		}
		out = append(out, name)
	}
	if p.Picker != nil {
		out = append(out, "pick:"+p.Picker.Name())
	}
	return out
}

// drawRecorder is a random source that keeps what it hands out: a
// receipt's decision draws through it from the Decider's own stream, so
// explaining a decision changes nothing.
type drawRecorder struct {
	src   rand.Source
	draws []uint64
}

func (d *drawRecorder) Uint64() uint64 {
	v := d.src.Uint64()
	d.draws = append(d.draws, v)
	return v
}
