package config

import (
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/sessions"
)

func TestSessionFlags(t *testing.T) {
	d := Default()
	if d.SessionTTL != sessions.DefaultTTL || d.MaxSessions != sessions.DefaultMaxSessions || d.MaxSessionIDBytes != sessions.DefaultMaxIDBytes ||
		d.SessionHeader != "x-session-id" || d.SessionBodyField != "session_id" {
		t.Fatalf("defaults: %+v", d)
	}
	env := map[string]string{"KVROUTER_SESSION_TTL": "90s"}
	cfg, err := Load([]string{"--max-sessions", "500", "--session-header", "X-Conversation", "--session-body-field", "",
		"--max-session-id-bytes", "64"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ac := cfg.Actors()
	if ac.Sessions.TTL != 90*time.Second || ac.Sessions.MaxSessions != 500 || ac.Sessions.MaxIDBytes != 64 ||
		cfg.SessionHeader != "X-Conversation" || cfg.SessionBodyField != "" {
		t.Fatalf("flags/env not applied: %+v %+v", cfg, ac.Sessions)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--session-ttl", "0s"}, "TTL"},
		{[]string{"--max-sessions", "0"}, "MaxSessions"},
		{[]string{"--max-session-id-bytes", "-1"}, "MaxIDBytes"},
		{[]string{"--session-header", "x session"}, "session-header"},
		{[]string{"--session-body-field", strings.Repeat("f", 200)}, "session-body-field"},
	} {
		if _, err := Load(bad.args, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error about %s", bad.args, err, bad.want)
		}
	}
}
