package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// WorkloadChat is a multi-turn chat sent as OpenAI messages to
// /v1/chat/completions: the router renders and tokenizes it with the
// served model's tokenizer (kvbench load --workload chat --model NAME
// against a router started with --served-model).
const WorkloadChat = "chat"

// ChatConfig shapes the chat workload: like multi-turn, but in words of
// text. Each turn's request holds the whole conversation so far (system
// prompt, earlier user messages and synthesized assistant replies) plus a
// new user message.
type ChatConfig struct {
	Conversations int
	Turns         int
	SystemWords   int
	UserWords     int
	ReplyWords    int
	OutputTokens  int
}

// Validate rejects shapes that would produce empty messages.
func (c ChatConfig) Validate() error {
	if c.Conversations <= 0 || c.Turns <= 0 {
		return fmt.Errorf("%w: chat needs conversations and turns > 0, got %d and %d", ErrBadWorkload, c.Conversations, c.Turns)
	}
	if c.SystemWords < 0 || c.UserWords <= 0 || c.ReplyWords <= 0 {
		return fmt.Errorf("%w: chat needs user and reply words > 0 and system words >= 0, got %d, %d and %d",
			ErrBadWorkload, c.UserWords, c.ReplyWords, c.SystemWords)
	}
	if c.OutputTokens <= 0 {
		return fmt.Errorf("%w: output tokens must be > 0, got %d", ErrBadWorkload, c.OutputTokens)
	}
	return nil
}

// chatWords is the vocabulary of the synthetic text.
var chatWords = strings.Fields(`the router engine cache block prefix token worker request model prompt turn
reply system user load queue latency throughput memory index event hash stream batch decode prefill
fast slow large small first last next every each some many few always often never again why how what
when where which because although while after before during between across through under over into
is are was were be been has have had do does did can could should would may might must will shall
run send route store evict match share reuse serve answer compute measure compare report explain
0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 1024 4096 ms GPU CPU KV LLM vLLM SGLang Dynamo , . ; : ? !`)

func chatText(r *rand.Rand, words int) string {
	var b strings.Builder
	for i := 0; i < words; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(chatWords[r.IntN(len(chatWords))])
	}
	return b.String()
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatPrompts returns n chat requests in arrival order (conversations in
// waves, their turns interleaved, as MultiTurnPrompts).
func ChatPrompts(c ChatConfig, n int, seed uint64) ([]Prompt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: request count must be >= 0, got %d", ErrBadWorkload, n)
	}
	r := newRand(seed, 7)
	out := make([]Prompt, 0, n)
	for len(out) < n {
		history := make([][]chatMessage, c.Conversations)
		for i := range history {
			if c.SystemWords > 0 {
				history[i] = []chatMessage{{"system", chatText(r, c.SystemWords)}}
			}
		}
		for t := 0; t < c.Turns && len(out) < n; t++ {
			for i := 0; i < c.Conversations && len(out) < n; i++ {
				history[i] = append(history[i], chatMessage{"user", chatText(r, c.UserWords)})
				js, err := json.Marshal(history[i])
				if err != nil {
					return nil, err
				}
				out = append(out, Prompt{Messages: js, MaxTokens: c.OutputTokens})
				history[i] = append(history[i], chatMessage{"assistant", chatText(r, c.ReplyWords)})
			}
		}
	}
	return out, nil
}
