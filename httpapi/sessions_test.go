package httpapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/metrics"
)

func newSessionServer(t *testing.T) *Server {
	t.Helper()
	_, r := newTestServer(t, 2)
	return New(Options{Router: r, Metrics: metrics.New(), BlockSize: 16, MaxBodyBytes: 1 << 20,
		Log: slog.New(slog.DiscardHandler), SessionHeader: "x-session-id", SessionBodyField: "session_id"})
}

func routeBody(id string, first int, session string) string {
	toks := make([]string, 64)
	for i := range toks {
		toks[i] = fmt.Sprint(first + i)
	}
	b := fmt.Sprintf(`{"request_id":%q,"token_ids":[%s]`, id, strings.Join(toks, ","))
	if session != "" {
		b += `,"session_id":` + session
	}
	return b + "}"
}

func TestSessionSticksAndEnds(t *testing.T) {
	s := newSessionServer(t)
	code, out := do(t, s, "POST", "/route", routeBody("a0", 0, `"s1"`))
	if code != 200 {
		t.Fatalf("route: %d %v", code, out)
	}
	bound := out["worker_id"]
	// Every request stays in flight (nobody frees them), so without the
	// session the load would spread them; with it they all go to bound.
	for i := 1; i <= 4; i++ {
		code, out = do(t, s, "POST", "/route", routeBody(fmt.Sprint("a", i), i*1000, `"s1"`))
		if code != 200 || out["worker_id"] != bound {
			t.Fatalf("request %d of the session: %d %v, want worker %v", i, code, out, bound)
		}
	}
	code, out = do(t, s, "POST", "/route", routeBody("free-agent", 99000, ""))
	if code != 200 || out["worker_id"] == bound {
		t.Fatalf("a request without session went to the loaded worker: %d %v", code, out)
	}
	// The header names the session too, and wins over the body.
	req := localRequest("POST", "/route", routeBody("h1", 50000, `"other"`))
	req.Header.Set("X-Session-Id", "s1")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	var hout map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &hout)
	if rec.Code != 200 || hout["worker_id"] != bound {
		t.Fatalf("header session: %d %v", rec.Code, hout)
	}

	code, out = do(t, s, "GET", "/sessions/s1", "")
	if code != 200 || out["worker_id"] != bound || out["last_used"] == nil {
		t.Fatalf("get: %d %v", code, out)
	}
	code, out = do(t, s, "DELETE", "/sessions/s1", "")
	if code != 200 || out["ended"] != true || out["session_id"] != "s1" {
		t.Fatalf("end: %d %v", code, out)
	}
	code, out = do(t, s, "DELETE", "/sessions/s1", "")
	if code != 404 || out["error"] == nil {
		t.Fatalf("end again: %d %v", code, out)
	}
	if code, out = do(t, s, "GET", "/sessions/s1", ""); code != 404 || out["error"] == nil {
		t.Fatalf("get an ended session: %d %v", code, out)
	}
	code, out = do(t, s, "DELETE", "/sessions/"+strings.Repeat("x", 300), "")
	if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "session id") {
		t.Fatalf("end with a huge id: %d %v", code, out)
	}
	code, out = do(t, s, "DELETE", "/sessions/a%01b", "")
	if code != 400 || out["error"] == nil {
		t.Fatalf("end with a control character: %d %v", code, out)
	}
}

func TestSessionBadInput(t *testing.T) {
	s := newSessionServer(t)
	for _, tt := range []struct {
		name, session string
		want          string
	}{
		{"number", `123`, "must be a string"},
		{"object", `{"a":1}`, "must be a string"},
		{"empty", `""`, "is empty"},
		{"huge", `"` + strings.Repeat("x", 10_000) + `"`, "at most 256"},
		{"control character", `"a\u0001b"`, "control character"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := do(t, s, "POST", "/route", routeBody("r-"+tt.name, 0, tt.session))
			if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), tt.want) {
				t.Fatalf("%d %v, want 400 with %q", code, out, tt.want)
			}
		})
	}
	req := localRequest("POST", "/route", routeBody("twice", 0, ""))
	req.Header.Add("X-Session-Id", "a")
	req.Header.Add("X-Session-Id", "b")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("header twice: %d %s", rec.Code, rec.Body)
	}
	// null is no session.
	if code, out := do(t, s, "POST", "/route", routeBody("null", 0, "null")); code != 200 {
		t.Fatalf("null session: %d %v", code, out)
	}
}

func TestFindTopLevelValue(t *testing.T) {
	for _, tt := range []struct {
		body, want string
		ok         bool
	}{
		{`{"session_id":"a"}`, `"a"`, true},
		{`{"x":{"session_id":"nested"},"session_id" : "b" }`, `"b"`, true},
		{`{"x":"\"session_id\":\"fake\"","session_id":"c"}`, `"c"`, true},
		{`{"token_ids":[1,2,3],"session_id":null}`, `null`, true},
		{`{"x":1}`, ``, false},
		{`[1,2]`, ``, false},
		{`{"session_id"`, ``, false},
	} {
		s, e, ok := findTopLevelValue([]byte(tt.body), "session_id")
		if ok != tt.ok || (ok && tt.body[s:e] != tt.want) {
			t.Errorf("%s: %q %v, want %q %v", tt.body, tt.body[s:e], ok, tt.want, tt.ok)
		}
	}
}

// FuzzSessionField: never panics, stays in bounds, and on a valid object
// agrees with encoding/json about the top-level field.
func FuzzSessionField(f *testing.F) {
	for _, seed := range []string{`{"session_id":"a"}`, `{"a":[1,{"b":"}"}],"session_id":"x\"y"}`, `{"session_id":1}`, `{`, `{"session_id":"a","session_id":"b"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, e, ok := findTopLevelValue(body, "session_id")
		if !ok {
			return
		}
		if s < 0 || e > len(body) || s > e {
			t.Fatalf("span %d..%d of %d bytes", s, e, len(body))
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) != nil || strings.Contains(string(body), `\`) {
			return // not an object, or escapes (keys are matched as written)
		}
		if raw, have := fields["session_id"]; have && strings.Count(string(body), `"session_id"`) == 1 {
			var a, b any
			if json.Unmarshal(raw, &a) == nil && json.Unmarshal(body[s:e], &b) == nil && fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("value %s, encoding/json says %s", body[s:e], raw)
			}
		}
	})
}
