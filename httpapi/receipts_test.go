package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A route asked to explain itself answers with its receipt, whose winner
// is the rank the answer names, and the replica keeps it for
// GET /decisions/{request_id}; a proxied request asked to explain itself
// names its receipt in X-Kvrouter-Decision.
func TestRouteReceipts(t *testing.T) {
	s := specServer(t)
	send := func(method, path, body string, header ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, specOrigin+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	client, admin := []string{"Authorization", "Bearer " + specClientToken}, []string{"Authorization", "Bearer " + specAdminToken}
	prompt := `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]`

	type answer struct {
		WorkerID uint64 `json:"worker_id"`
		DpRank   uint32 `json:"dp_rank"`
		Receipt  *struct {
			RequestID  string            `json:"request_id"`
			Winner     string            `json:"winner"`
			Candidates []json.RawMessage `json:"candidates"`
			Pipeline   []string          `json:"pipeline"`
		} `json:"receipt"`
	}
	var plain, explained answer
	rec := send("POST", "/route", `{"request_id":"plain","update_states":false,"token_ids":`+prompt+`}`, client...)
	if err := json.Unmarshal(rec.Body.Bytes(), &plain); err != nil || rec.Code != http.StatusOK || plain.Receipt != nil {
		t.Fatalf("a route nobody asked to explain: %d %s", rec.Code, rec.Body)
	}
	rec = send("POST", "/route", `{"request_id":"asked","token_ids":`+prompt+`}`, append(client, "X-Kvrouter-Explain", "1")...)
	if err := json.Unmarshal(rec.Body.Bytes(), &explained); err != nil || rec.Code != http.StatusOK || explained.Receipt == nil {
		t.Fatalf("an explained route: %d %s", rec.Code, rec.Body)
	}
	r := explained.Receipt
	if r.RequestID != "asked" || len(r.Candidates) != 2 || len(r.Pipeline) == 0 || r.Winner == "" {
		t.Fatalf("receipt %+v", r)
	}
	rec = send("GET", "/decisions/asked", "", admin...)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"request_id":"asked"`) {
		t.Fatalf("GET /decisions/asked: %d %s", rec.Code, rec.Body)
	}
	if rec := send("GET", "/decisions/asked", "", client...); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a client token read a receipt: %d", rec.Code)
	}
	if rec := send("GET", "/decisions/never-routed", "", admin...); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("a decision never made: %d %s, want a 404 JSON error", rec.Code, rec.Body)
	}

	rec = send("POST", "/v1/completions", `{"prompt":`+prompt+`,"max_tokens":2}`, append(client, "X-Kvrouter-Explain", "1")...)
	id := rec.Header().Get(DecisionHeader)
	if rec.Code != http.StatusOK || id == "" || id != rec.Header().Get("X-Request-Id") {
		t.Fatalf("an explained completion: %d, decision header %q", rec.Code, id)
	}
	if rec := send("GET", "/decisions/"+id, "", admin...); rec.Code != http.StatusOK {
		t.Fatalf("the proxied request's receipt: %d %s", rec.Code, rec.Body)
	}
	rec = send("POST", "/v1/completions", `{"prompt":`+prompt+`,"max_tokens":2}`, client...)
	if rec.Code != http.StatusOK || rec.Header().Get(DecisionHeader) != "" {
		t.Fatalf("an unexplained completion: %d, decision header %q", rec.Code, rec.Header().Get(DecisionHeader))
	}
}

// The proxy and the endpoint picker (both prepare) route with the body's
// model, which selects the policy file's pipeline, and the explain header.
func TestPrepareCarriesModelAndExplain(t *testing.T) {
	s := specServer(t)
	h := http.Header{}
	h.Set(ExplainHeader, "1")
	p, f := s.prepare(t.Context(), PathCompletions, h, []byte(`{"model":"llama-lora","prompt":[1,2,3],"max_tokens":1}`))
	if f != nil {
		t.Fatalf("prepare: %+v", f)
	}
	if p.modelName != "llama-lora" || !p.explain {
		t.Fatalf("model %q explain %v, want llama-lora and true", p.modelName, p.explain)
	}
	p, f = s.prepare(t.Context(), PathCompletions, http.Header{}, []byte(`{"prompt":[1,2,3]}`))
	if f != nil || p.modelName != "" || p.explain {
		t.Fatalf("no model, no header: %+v %q %v", f, p.modelName, p.explain)
	}
}
