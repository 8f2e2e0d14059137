package mockengine

import (
	"errors"
	"slices"
	"testing"
)

func TestParseCompletion(t *testing.T) {
	tests := []struct {
		name, body, header string
		want               parsedCompletion
	}{
		{"flat prompt, defaults", `{"prompt":[1,2]}`, "", parsedCompletion{prompt: []uint32{1, 2}, maxTokens: 16, dpRank: -1}},
		{"nested prompt", `{"prompt":[[3]],"max_tokens":4}`, "", parsedCompletion{prompt: []uint32{3}, maxTokens: 4, dpRank: -1}},
		{"rank from body beats header", `{"prompt":[1],"dp_rank":2}`, "5", parsedCompletion{prompt: []uint32{1}, maxTokens: 16, dpRank: 2}},
		{"rank from header", `{"prompt":[1]}`, "3", parsedCompletion{prompt: []uint32{1}, maxTokens: 16, dpRank: 3}},
		{"stream with usage", `{"prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`, "",
			parsedCompletion{prompt: []uint32{1}, maxTokens: 16, dpRank: -1, stream: true, includeUsage: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCompletion([]byte(tt.body), tt.header)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.prompt, tt.want.prompt) || got.maxTokens != tt.want.maxTokens || got.dpRank != tt.want.dpRank ||
				got.stream != tt.want.stream || got.includeUsage != tt.want.includeUsage {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseCompletion(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":[1,2,3],"max_tokens":5,"stream":true}`,
		`{"prompt":[[1,2]],"dp_rank":1}`,
		`{"prompt":"text"}`,
		`{"prompt":[4294967296]}`,
		`[]`, `null`, `{`,
	} {
		f.Add([]byte(seed), "")
	}
	f.Add([]byte(`{"prompt":[1]}`), "-1")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		p, err := parseCompletion(body, header)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error not marked as a bad request: %v", err)
			}
			return
		}
		if len(p.prompt) == 0 || p.maxTokens < 1 || p.dpRank < -1 {
			t.Fatalf("accepted an invalid request: %+v", p)
		}
	})
}
