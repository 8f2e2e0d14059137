package httpapi

import (
	"net/http/httptest"
	"testing"
)

// BenchmarkDataGate is what a client token costs a data-plane request:
// parse the header, hash the token, compare in constant time.
func BenchmarkDataGate(b *testing.B) {
	s := &Server{opts: Options{APITokens: StaticTokens(apiToken), AdminTokens: StaticTokens(adminToken)}}
	req := httptest.NewRequest("POST", "/route", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		if !s.dataGate(w, req) {
			b.Fatal("refused")
		}
	}
}
