package bench

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Workload kinds accepted by ParseWorkloadKind and the kvbench flags.
const (
	WorkloadSharedPrefix = "shared-prefix"
	WorkloadMultiTurn    = "multi-turn"
	WorkloadRandom       = "random"
	WorkloadMooncake     = "mooncake"
)

// ErrBadWorkload marks a workload configuration that cannot be generated.
var ErrBadWorkload = errors.New("bad workload")

// Prompt is one request's content before it is given an arrival time.
type Prompt struct {
	Tokens    []uint32
	MaxTokens int
	// Messages, when set, is an OpenAI messages array (JSON) sent to
	// /v1/chat/completions instead of Tokens (the chat workload).
	Messages []byte
}

// Request is a prompt scheduled at an offset from the start of a run.
type Request struct {
	ID      string
	Arrival time.Duration
	Prompt
}

// SharedPrefixConfig is llm-d's shared-prefix shape: Groups system prompts
// of SystemTokens each, PromptsPerGroup distinct questions of
// QuestionTokens per group, OutputTokens generated per request.
type SharedPrefixConfig struct {
	Groups          int
	PromptsPerGroup int
	SystemTokens    int
	QuestionTokens  int
	OutputTokens    int
}

// LLMDSharedPrefix is the shape of llm-d's precise-routing benchmark.
func LLMDSharedPrefix() SharedPrefixConfig {
	return SharedPrefixConfig{Groups: 150, PromptsPerGroup: 5, SystemTokens: 6000, QuestionTokens: 1200, OutputTokens: 1000}
}

// Validate rejects shapes that would produce empty or degenerate prompts.
func (c SharedPrefixConfig) Validate() error {
	if c.Groups <= 0 || c.PromptsPerGroup <= 0 {
		return fmt.Errorf("%w: shared-prefix needs groups and prompts per group > 0, got %d and %d",
			ErrBadWorkload, c.Groups, c.PromptsPerGroup)
	}
	if c.SystemTokens < 0 || c.QuestionTokens < 0 || c.SystemTokens+c.QuestionTokens == 0 {
		return fmt.Errorf("%w: shared-prefix needs a non-empty prompt (system %d + question %d tokens)",
			ErrBadWorkload, c.SystemTokens, c.QuestionTokens)
	}
	if c.OutputTokens <= 0 {
		return fmt.Errorf("%w: output tokens must be > 0, got %d", ErrBadWorkload, c.OutputTokens)
	}
	return nil
}

// SharedPrefixPrompts returns n prompts. Each picks a group and one of the
// group's questions uniformly at random, as llm-d's inference-perf does, so
// a question may repeat once n exceeds the pool.
func SharedPrefixPrompts(c SharedPrefixConfig, n int, seed uint64) ([]Prompt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: request count must be >= 0, got %d", ErrBadWorkload, n)
	}
	content := newRand(seed, 1)
	systems := make([][]uint32, c.Groups)
	questions := make([][][]uint32, c.Groups)
	for g := range systems {
		systems[g] = randomTokens(nil, content, c.SystemTokens)
		questions[g] = make([][]uint32, c.PromptsPerGroup)
		for q := range questions[g] {
			questions[g][q] = randomTokens(nil, content, c.QuestionTokens)
		}
	}
	picks := newRand(seed, 2)
	out := make([]Prompt, n)
	for i := range out {
		g, q := picks.IntN(c.Groups), picks.IntN(c.PromptsPerGroup)
		toks := make([]uint32, 0, c.SystemTokens+c.QuestionTokens)
		toks = append(append(toks, systems[g]...), questions[g][q]...)
		out[i] = Prompt{Tokens: toks, MaxTokens: c.OutputTokens}
	}
	return out, nil
}

// MultiTurnConfig is a chat workload: each turn's prompt is the whole
// conversation so far (system prompt, earlier user turns and replies) plus
// a new user message. Conversations run in waves of Conversations at a
// time, their turns interleaved so a turn usually arrives after the
// previous turn of the same conversation finished.
type MultiTurnConfig struct {
	Conversations int
	Turns         int
	SystemTokens  int
	UserTokens    int
	OutputTokens  int
}

// Validate rejects shapes that would produce empty prompts.
func (c MultiTurnConfig) Validate() error {
	if c.Conversations <= 0 || c.Turns <= 0 {
		return fmt.Errorf("%w: multi-turn needs conversations and turns > 0, got %d and %d",
			ErrBadWorkload, c.Conversations, c.Turns)
	}
	if c.SystemTokens < 0 || c.UserTokens <= 0 {
		return fmt.Errorf("%w: multi-turn needs user tokens > 0 and system tokens >= 0, got %d and %d",
			ErrBadWorkload, c.UserTokens, c.SystemTokens)
	}
	if c.OutputTokens <= 0 {
		return fmt.Errorf("%w: output tokens must be > 0, got %d", ErrBadWorkload, c.OutputTokens)
	}
	return nil
}

// MultiTurnPrompts returns n prompts in arrival order. The assistant's
// replies are synthesized here (the mock engine's output ids are not
// replayed), so the cacheable part of turn t+1 is turn t's prompt.
func MultiTurnPrompts(c MultiTurnConfig, n int, seed uint64) ([]Prompt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: request count must be >= 0, got %d", ErrBadWorkload, n)
	}
	r := newRand(seed, 3)
	out := make([]Prompt, 0, n)
	for len(out) < n {
		history := make([][]uint32, c.Conversations)
		for i := range history {
			history[i] = randomTokens(nil, r, c.SystemTokens)
		}
		for t := 0; t < c.Turns && len(out) < n; t++ {
			for i := 0; i < c.Conversations && len(out) < n; i++ {
				history[i] = randomTokens(history[i], r, c.UserTokens)
				out = append(out, Prompt{Tokens: append([]uint32(nil), history[i]...), MaxTokens: c.OutputTokens})
				history[i] = randomTokens(history[i], r, c.OutputTokens) // the reply joins the context
			}
		}
	}
	return out, nil
}

// RandomConfig is a no-reuse workload: every prompt is fresh.
type RandomConfig struct {
	InputTokens  int
	OutputTokens int
}

// RandomPrompts returns n unrelated prompts.
func RandomPrompts(c RandomConfig, n int, seed uint64) ([]Prompt, error) {
	if c.InputTokens <= 0 || c.OutputTokens <= 0 {
		return nil, fmt.Errorf("%w: random needs input and output tokens > 0, got %d and %d",
			ErrBadWorkload, c.InputTokens, c.OutputTokens)
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: request count must be >= 0, got %d", ErrBadWorkload, n)
	}
	r := newRand(seed, 4)
	out := make([]Prompt, n)
	for i := range out {
		out[i] = Prompt{Tokens: randomTokens(nil, r, c.InputTokens), MaxTokens: c.OutputTokens}
	}
	return out, nil
}

// PoissonSchedule gives prompts exponentially distributed gaps with mean
// 1/qps, the first at zero, so the offered load is an open-loop Poisson
// process at qps requests per second.
func PoissonSchedule(prompts []Prompt, qps float64, seed uint64) ([]Request, error) {
	if !(qps > 0) || math.IsInf(qps, 0) {
		return nil, fmt.Errorf("%w: qps must be a positive number, got %v", ErrBadWorkload, qps)
	}
	r := newRand(seed, 5)
	out := make([]Request, len(prompts))
	var at float64
	for i, p := range prompts {
		if i > 0 {
			at += r.ExpFloat64() / qps
		}
		out[i] = Request{ID: fmt.Sprintf("req-%d", i), Arrival: time.Duration(at * float64(time.Second)), Prompt: p}
	}
	return out, nil
}

// OfferedQPS is the request rate a schedule offers: requests over the span
// between the first and the last arrival (0 for fewer than two requests).
func OfferedQPS(reqs []Request) float64 {
	if len(reqs) < 2 {
		return 0
	}
	span := (reqs[len(reqs)-1].Arrival - reqs[0].Arrival).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(len(reqs)-1) / span
}
