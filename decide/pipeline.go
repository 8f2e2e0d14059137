package decide

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
)

// Context is what the plugins of one decision read.
type Context struct {
	// Config is the scheduling config with the request's override.
	Config    *scheduling.Config
	BlockSize int
	ISL       int // prompt tokens
	Blocks    int // prompt full blocks
	Ranks     *Ranks
	// Plan is the decision's state (session binding, move reason).
	Plan *Plan
	// Receipt is being filled when the caller asked for one (nil: not).
	Receipt *Receipt
	// Lora is the request's LoRA adapter ("" for the base model).
	Lora string
	// Now is the decision's time (Unix nanoseconds).
	Now int64
	// Adapters is the Decider's table of ranks that served adapters.
	Adapters *Adapters
}

// Stability says how settled a plugin's behaviour and name are.
type Stability string

// Stability levels.
const (
	// Stable: the behaviour is kept; its name and parameters stay.
	Stable Stability = "stable"
	// Beta: tested, its parameters may still change.
	Beta Stability = "beta"
	// Alpha: experimental, may change or go.
	Alpha Stability = "alpha"
)

// Plugin is what every stage's plugin tells about itself.
type Plugin interface {
	Name() string
	Stability() Stability
}

// Filter narrows the candidates (it returns cands itself or a subset in
// the same order).
type Filter interface {
	Plugin
	Filter(c *Context, cands []scheduling.Candidate) []scheduling.Candidate
}

// Scorer writes a cost per candidate into dst (grown as needed), lower
// is better. A pipeline adds its scorers' costs, each times its weight.
type Scorer interface {
	Plugin
	Score(c *Context, cands []scheduling.Candidate, dst []float64) ([]float64, error)
}

// Picker chooses one of the scored candidates (costs is not empty),
// drawing from rng only.
type Picker interface {
	Plugin
	Pick(c *Context, costs []float64, rng *rand.Rand) int
}

// Admitter decides whether a recorded request is routed now (true) or
// waits in the queue.
type Admitter interface {
	Plugin
	Admit(c *Context, cands []scheduling.Candidate) bool
}

// Weighted is a scorer and its weight in the sum.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Pipeline composes a decision's stages. A policy file builds one from
// named plugins (Build); the zero value is DefaultPipeline.
type Pipeline struct {
	Admitter Admitter
	Filters  []Filter
	Scorers  []Weighted
	Picker   Picker
}

func (p Pipeline) empty() bool {
	return p.Admitter == nil && p.Filters == nil && p.Scorers == nil && p.Picker == nil
}

// DefaultPipeline is today's decision, as the flags configure it: the
// queue threshold admits, session affinity filters, the configured cost
// (--router-cost) scores with weight 1, and the temperature picks.
func DefaultPipeline() Pipeline {
	return Pipeline{
		Admitter: QueueThreshold{},
		Filters:  []Filter{SessionAffinity{}},
		Scorers:  []Weighted{{Scorer: ConfiguredCost{}, Weight: 1}},
		Picker:   Temperature{},
	}
}

// score adds the weighted scorers' costs. One scorer of weight 1 is its
// cost exactly (Dynamo's, bit for bit).
func (p Pipeline) score(c *Context, cands []scheduling.Candidate, dst []float64) ([]float64, error) {
	if len(p.Scorers) == 1 && p.Scorers[0].Weight == 1 {
		return p.Scorers[0].Scorer.Score(c, cands, dst)
	}
	dst = append(dst[:0], make([]float64, len(cands))...)
	var part []float64
	for _, w := range p.Scorers {
		var err error
		if part, err = w.Scorer.Score(c, cands, part); err != nil {
			return dst, fmt.Errorf("scorer %s: %w", w.Scorer.Name(), err)
		}
		for i := range dst {
			dst[i] += w.Weight * part[i]
		}
	}
	return dst, nil
}

// ---- built-in plugins ----

// QueueThreshold admits a request unless every candidate is over the
// queue threshold (scheduling.AllOverloaded: more than
// router_queue_threshold × max_num_batched_tokens prompt tokens waiting
// for prefill). Reads: candidates' active prefill tokens, the ranks'
// budgets, the queue knobs. Stable.
type QueueThreshold struct{}

func (QueueThreshold) Name() string         { return "queue-threshold" }
func (QueueThreshold) Stability() Stability { return Stable }
func (QueueThreshold) Admit(c *Context, cands []scheduling.Candidate) bool {
	return !scheduling.AllOverloaded(*c.Config, cands, c.Ranks.Budgets)
}

// AdmitAll routes every request at once (no queue). Reads nothing. Beta.
type AdmitAll struct{}

func (AdmitAll) Name() string                                { return "admit-all" }
func (AdmitAll) Stability() Stability                        { return Beta }
func (AdmitAll) Admit(*Context, []scheduling.Candidate) bool { return true }

// SessionAffinity keeps a sticky session's request on its bound rank
// while that rank is still fit with the loads now known
// (scheduling.Overloaded, the rule that parks requests); otherwise it
// leaves the candidates as they are and notes why the session moves.
// Reads: the plan's binding, the bound rank's load and budget. Stable.
type SessionAffinity struct{}

func (SessionAffinity) Name() string         { return "session-affinity" }
func (SessionAffinity) Stability() Stability { return Stable }
func (SessionAffinity) Filter(c *Context, cands []scheduling.Candidate) []scheduling.Candidate {
	p := c.Plan
	if !p.HasSticky {
		return cands
	}
	for i, cand := range cands {
		if cand.Worker != p.Sticky {
			continue
		}
		stay, reason := sessions.Stay(sessions.BoundRank{Registered: true, Eligible: true,
			Overloaded: scheduling.Overloaded(*c.Config, cand, c.Ranks.Budgets[cand.Worker.WorkerID])})
		if stay {
			return cands[i : i+1]
		}
		p.MoveReason, p.HasSticky = reason, false
		return cands
	}
	p.MoveReason, p.HasSticky = sessions.MoveGone, false // left the registry while the decision ran
	return cands
}

// NotOverloaded leaves out the candidates over the queue threshold
// (scheduling.Overloaded) when some are not. Reads: active prefill
// tokens, budgets, the queue knobs. Alpha (not in the default pipeline:
// the cost already prices the prefill queue).
type NotOverloaded struct{}

func (NotOverloaded) Name() string         { return "not-overloaded" }
func (NotOverloaded) Stability() Stability { return Alpha }
func (NotOverloaded) Filter(c *Context, cands []scheduling.Candidate) []scheduling.Candidate {
	var out []scheduling.Candidate
	for _, cand := range cands {
		if !scheduling.Overloaded(*c.Config, cand, c.Ranks.Budgets[cand.Worker.WorkerID]) {
			out = append(out, cand)
		}
	}
	if len(out) == 0 {
		return cands
	}
	return out
}

// ConfiguredCost scores with the cost the config names (router_cost:
// Dynamo's worker_logit, or the ttft cost). Reads: overlaps (device,
// host, disk, shared), active prefill tokens and blocks, new blocks,
// active requests; the ttft cost also the prefill rates, the head
// request's progress and the KV capacity. Stable.
type ConfiguredCost struct{}

func (ConfiguredCost) Name() string         { return "cost" }
func (ConfiguredCost) Stability() Stability { return Stable }
func (ConfiguredCost) Score(c *Context, cands []scheduling.Candidate, dst []float64) ([]float64, error) {
	return scheduling.ScorePhase(scheduling.PhaseAggregated, *c.Config, c.BlockSize, c.ISL, c.Blocks, cands, dst)
}

// FixedCost scores with one named cost whatever router_cost says
// (dynamo or ttft), for a pipeline that mixes them. Reads what that cost
// reads. Beta.
type FixedCost struct{ Model scheduling.CostModel }

func (f FixedCost) Name() string       { return "cost-" + string(f.Model) }
func (FixedCost) Stability() Stability { return Beta }
func (f FixedCost) Score(c *Context, cands []scheduling.Candidate, dst []float64) ([]float64, error) {
	cfg := *c.Config
	cfg.RouterCost = f.Model
	return scheduling.ScorePhase(scheduling.PhaseAggregated, cfg, c.BlockSize, c.ISL, c.Blocks, cands, dst)
}

// Temperature picks the cheapest candidate at router_temperature 0
// (exact ties broken uniformly at random), and samples a softmax over
// min-max normalised costs above it (scheduling.Pick). Reads: the costs,
// the temperature (with the request's override). Stable.
type Temperature struct{}

func (Temperature) Name() string         { return "temperature" }
func (Temperature) Stability() Stability { return Stable }
func (Temperature) Pick(c *Context, costs []float64, rng *rand.Rand) int {
	return scheduling.Pick(costs, c.Config.RouterTemperature, rng)
}

// ---- building a pipeline from names ----

// Spec names a pipeline's plugins, as a policy file writes them.
type Spec struct {
	Admitter string
	Filters  []string
	Scorers  []WeightedName
	Picker   string
}

// WeightedName is a scorer's name and weight in a Spec.
type WeightedName struct {
	Name   string
	Weight float64
}

var (
	admitters = map[string]Admitter{"queue-threshold": QueueThreshold{}, "admit-all": AdmitAll{}}
	filters   = map[string]Filter{"session-affinity": SessionAffinity{}, "not-overloaded": NotOverloaded{}}
	scorers   = map[string]Scorer{"cost": ConfiguredCost{}, "cost-dynamo": FixedCost{scheduling.CostDynamo},
		"cost-ttft": FixedCost{scheduling.CostTTFT}, "lora-affinity": LoraAffinity{}}
	pickers = map[string]Picker{"temperature": Temperature{}}
)

// Build turns a Spec into a Pipeline: unknown names, a missing stage and
// weights that are negative, not finite, or all zero are errors.
func Build(s Spec) (Pipeline, error) {
	var p Pipeline
	var ok bool
	if p.Admitter, ok = admitters[s.Admitter]; !ok {
		return p, fmt.Errorf("unknown admitter %q (want one of %v)", s.Admitter, names(admitters))
	}
	for _, n := range s.Filters {
		f, ok := filters[n]
		if !ok {
			return p, fmt.Errorf("unknown filter %q (want one of %v)", n, names(filters))
		}
		p.Filters = append(p.Filters, f)
	}
	total := 0.0
	for _, w := range s.Scorers {
		sc, ok := scorers[w.Name]
		if !ok {
			return p, fmt.Errorf("unknown scorer %q (want one of %v)", w.Name, names(scorers))
		}
		if !(w.Weight >= 0) || w.Weight > 1e9 {
			return p, fmt.Errorf("scorer %s: weight %v must be in [0, 1e9]", w.Name, w.Weight)
		}
		total += w.Weight
		p.Scorers = append(p.Scorers, Weighted{Scorer: sc, Weight: w.Weight})
	}
	if total == 0 {
		return p, fmt.Errorf("a pipeline needs a scorer with a positive weight")
	}
	if p.Picker, ok = pickers[s.Picker]; !ok {
		return p, fmt.Errorf("unknown picker %q (want one of %v)", s.Picker, names(pickers))
	}
	return p, nil
}

// DefaultSpec is DefaultPipeline by name.
func DefaultSpec() Spec {
	return Spec{Admitter: "queue-threshold", Filters: []string{"session-affinity"},
		Scorers: []WeightedName{{Name: "cost", Weight: 1}}, Picker: "temperature"}
}

func names[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
