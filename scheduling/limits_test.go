package scheduling

import (
	"errors"
	"strings"
	"testing"
)

func TestLimits(t *testing.T) {
	l := Limits{MaxPromptTokens: 10, MaxRequestIDBytes: 4, MaxActiveRequests: 2, MaxActiveRequestsPerClient: 3}
	tests := []struct {
		name    string
		err     error
		wantErr error
		mention string
	}{
		{"prompt at the bound", l.CheckRequest(10, "abcd"), nil, ""},
		{"prompt past the bound", l.CheckRequest(11, "a"), ErrInvalidInput, "max-prompt-tokens"},
		{"id past the bound", l.CheckRequest(1, "abcde"), ErrInvalidInput, "max-request-id-bytes"},
		{"room for one more", l.CheckAdmission(1), nil, ""},
		{"full", l.CheckAdmission(2), ErrLimit, "max-active-requests"},
		{"no bounds", Limits{}.CheckRequest(1<<30, strings.Repeat("x", 1<<20)), nil, ""},
		{"no admission bound", Limits{}.CheckAdmission(1 << 30), nil, ""},
		{"client under its bound", l.CheckClient("token:ab", 2), nil, ""},
		{"client at its bound", l.CheckClient("token:ab", 3), ErrClientLimit, "max-active-requests-per-client"},
		{"a client bound is a limit", l.CheckClient("addr:10.0.0.1", 9), ErrLimit, "per client"},
		{"unnamed callers are not bounded per client", l.CheckClient("", 9), nil, ""},
		{"no client bound", Limits{}.CheckClient("token:ab", 1<<30), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantErr == nil {
				if tt.err != nil {
					t.Fatal(tt.err)
				}
				return
			}
			if !errors.Is(tt.err, tt.wantErr) || !strings.Contains(tt.err.Error(), tt.mention) {
				t.Fatalf("err %v, want %v mentioning %q", tt.err, tt.wantErr, tt.mention)
			}
		})
	}
	if err := (Limits{MaxPromptTokens: -1}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative bound accepted: %v", err)
	}
}
