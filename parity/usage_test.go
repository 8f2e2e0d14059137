package parity

import (
	"errors"
	"testing"
)

// Wire shapes as the engines write them (vLLM's UsageInfo with
// PromptTokenUsageInfo; SGLang's UsageInfo with prompt_tokens_details only
// when cached tokens > 0; the OpenAI API's stream_options usage chunk).
func TestResponseUsage(t *testing.T) {
	cases := []struct {
		name string
		body string
		want Usage
		ok   bool
		bad  bool
	}{
		{"vllm with details", `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x"}],` +
			`"usage":{"prompt_tokens":12,"total_tokens":16,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":8}}}`,
			Usage{PromptTokens: 12, CachedTokens: 8, HasCached: true}, true, false},
		{"vllm without --enable-prompt-tokens-details", `{"usage":{"prompt_tokens":12,"total_tokens":16,"completion_tokens":4,"prompt_tokens_details":null}}`,
			Usage{PromptTokens: 12}, true, false},
		{"sglang nothing cached", `{"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`, Usage{PromptTokens: 7}, true, false},
		{"cached zero is reported", `{"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}}`, Usage{PromptTokens: 7, HasCached: true}, true, false},
		{"details without cached_tokens", `{"usage":{"prompt_tokens":7,"prompt_tokens_details":{"audio_tokens":0}}}`, Usage{PromptTokens: 7}, true, false},
		{"no usage", `{"choices":[]}`, Usage{}, false, false},
		{"usage null", `{"usage":null}`, Usage{}, false, false},
		{"not json", `data: {}`, Usage{}, false, true},
		{"no prompt_tokens", `{"usage":{"completion_tokens":3}}`, Usage{}, false, true},
		{"negative", `{"usage":{"prompt_tokens":-1}}`, Usage{}, false, true},
		{"fraction", `{"usage":{"prompt_tokens":1.5}}`, Usage{}, false, true},
		{"string", `{"usage":{"prompt_tokens":"12"}}`, Usage{}, false, true},
		{"cached over prompt", `{"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":5}}}`, Usage{}, false, true},
		{"huge", `{"usage":{"prompt_tokens":1e30}}`, Usage{}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, ok, err := ResponseUsage([]byte(tc.body))
			if (err != nil) != tc.bad || (err != nil && !errors.Is(err, ErrMalformedUsage)) {
				t.Fatalf("err %v, want bad=%v", err, tc.bad)
			}
			if ok != tc.ok || u != tc.want {
				t.Fatalf("got %+v %v, want %+v %v", u, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestStreamChunk(t *testing.T) {
	cases := []struct {
		name string
		data string
		want Chunk
		bad  bool
	}{
		{"token chunk", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}`, Chunk{}, false},
		{"token chunk with usage null", `{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`, Chunk{}, false},
		{"usage-only chunk", `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":2,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":16}}}`,
			Chunk{Usage: Usage{PromptTokens: 30, CachedTokens: 16, HasCached: true}, HasUsage: true, UsageOnly: true}, false},
		{"continuous usage on a token chunk", `{"choices":[{"index":0,"text":"x"}],"usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31}}`,
			Chunk{Usage: Usage{PromptTokens: 30}, HasUsage: true}, false},
		{"text mentioning usage", `{"choices":[{"index":0,"text":"\"usage\""}]}`, Chunk{}, false},
		{"broken", `{"usage":`, Chunk{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := StreamChunk([]byte(tc.data))
			if (err != nil) != tc.bad || c != tc.want {
				t.Fatalf("got %+v %v, want %+v bad=%v", c, err, tc.want, tc.bad)
			}
		})
	}
}

func FuzzResponseUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}}`))
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":3}}`))
	f.Add([]byte(`{"usage":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, ok, err := ResponseUsage(data)
		if err == nil && ok && (u.PromptTokens < 0 || u.CachedTokens < 0 || u.CachedTokens > u.PromptTokens) {
			t.Fatalf("impossible usage %+v", u)
		}
		c, err := StreamChunk(data)
		if err == nil && c.HasUsage && (c.Usage.PromptTokens < 0 || c.Usage.CachedTokens > c.Usage.PromptTokens) {
			t.Fatalf("impossible chunk %+v", c)
		}
		tu, tok, err := TailUsage(data)
		if err == nil && tok && (tu.PromptTokens < 0 || tu.CachedTokens < 0 || tu.CachedTokens > tu.PromptTokens) {
			t.Fatalf("impossible tail usage %+v", tu)
		}
	})
}

// TailUsage finds the usage member in the last bytes of a unary answer,
// whatever came before it (here cut mid-string), and never mistakes a
// "usage" inside a string for the member.
func TestTailUsage(t *testing.T) {
	for _, c := range []struct {
		name, tail string
		want       Usage
		ok, err    bool
	}{
		{"whole body", `{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}`,
			Usage{PromptTokens: 12, CachedTokens: 8, HasCached: true}, true, false},
		{"cut mid-text", `ay \"usage\": not this one","finish_reason":"length"}],"usage" : {"prompt_tokens":7}}`,
			Usage{PromptTokens: 7}, true, false},
		{"the word in a value", `"text":"usage"}],"usage":{"prompt_tokens":5,"prompt_tokens_details":null}}`,
			Usage{PromptTokens: 5}, true, false},
		{"no usage", `lo"}]}`, Usage{}, false, false},
		{"usage null", `,"usage":null}`, Usage{}, false, false},
		{"cut usage", `,"usage":{"prompt_tok`, Usage{}, false, true},
		{"cached over prompt", `,"usage":{"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`, Usage{}, false, true},
	} {
		u, ok, err := TailUsage([]byte(c.tail))
		if (err != nil) != c.err || ok != c.ok || u != c.want {
			t.Errorf("%s: %+v %v %v, want %+v %v err=%v", c.name, u, ok, err, c.want, c.ok, c.err)
		}
	}
}
