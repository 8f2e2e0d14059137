package routeapi

import (
	"strings"
	"testing"
)

func TestCheckRequestIDText(t *testing.T) {
	for _, tc := range []struct {
		id, err string
	}{
		{"req-42_ok.x:y/z", ""},
		{"ünïcödé-日本-🙂", ""},
		{"a\x00b", "control character U+0000"},
		{"tab\there", "control character U+0009"},
		{"del\x7f", "control character U+007F"},
		{"c1\u0085", "control character U+0085"},
		{"bad\xffutf8", "not UTF-8"},
		{"trunc\xe2\x80", "not UTF-8"},
		{"replaced\ufffd", "not UTF-8"},
		{"evil\u202Etxt.exe", "bidirectional control U+202E"},
		{"lrm\u200e", "bidirectional control U+200E"},
		{"isolate\u2066x\u2069", "bidirectional control U+2066"},
		{"alm\u061c", "bidirectional control U+061C"},
	} {
		err := CheckRequestIDText(tc.id)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%q: %v, want accepted", tc.id, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want %q", tc.id, err, tc.err)
		}
	}
	// Both APIs' entry points apply it.
	if _, err := RouteMessage(Route{RequestID: "x\u202e", HasTokens: true, Tokens: []uint32{1}}); err == nil {
		t.Error("RouteMessage accepted a bidi control")
	}
	if err := CheckRequestID("x\x00"); err == nil {
		t.Error("CheckRequestID accepted NUL")
	}
}
