package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
)

// BenchmarkPrepareCompletion is the proxy's and the endpoint picker's
// reading of one /v1/completions body before the decision: a 4k-token
// prompt of token ids with max_tokens, stream and a model-less body, as
// the proxy and the picker receive it (prepare: fields, prompt, max
// tokens, session).
func BenchmarkPrepareCompletion(b *testing.B) {
	s, _ := newTestServer(b, 1)
	ids := make([]uint32, 4096)
	for i := range ids {
		ids[i] = uint32(i*7919) % 151000
	}
	body, err := json.Marshal(map[string]any{"prompt": ids, "max_tokens": 16, "stream": true, "temperature": 0.7})
	if err != nil {
		b.Fatal(err)
	}
	ctx, header := context.Background(), http.Header{}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		p, f := s.prepare(ctx, PathCompletions, header, body)
		if f != nil || len(p.tokens) != len(ids) {
			b.Fatalf("prepare: %v", f)
		}
	}
}
