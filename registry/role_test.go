package registry

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// A worker's role is part of its shape: a refresh that only changes the
// role keeps its ranks (and so its requests).
func TestRoleRefreshKeepsRanks(t *testing.T) {
	t0 := time.Unix(100, 0)
	r := New[string](8192, Limits{})
	if _, err := r.Upsert(1, Shape{DpSize: 2}, "a", false, t0); err != nil {
		t.Fatal(err)
	}
	if r.Role(1) != kv.RoleBoth {
		t.Fatalf("default role %v", r.Role(1))
	}
	ch, err := r.Upsert(1, Shape{DpSize: 2, Role: kv.RolePrefill}, "a", false, t0)
	if err != nil || !ch.Empty() {
		t.Fatalf("role change moved ranks: %+v %v", ch, err)
	}
	if r.Role(1) != kv.RolePrefill || r.Role(99) != kv.RoleBoth {
		t.Fatalf("after role change: role %v, unknown worker's %v", r.Role(1), r.Role(99))
	}
}

func TestParseRole(t *testing.T) {
	for in, want := range map[string]kv.Role{"": kv.RoleBoth, "both": kv.RoleBoth, "prefill": kv.RolePrefill, "decode": kv.RoleDecode} {
		if got, err := kv.ParseRole(in); err != nil || got != want {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := kv.ParseRole("Prefill"); err == nil {
		t.Error("ParseRole is case-sensitive, as vLLM's kv_role is")
	}
	if !kv.RoleBoth.Prefills() || !kv.RoleBoth.Decodes() || kv.RolePrefill.Decodes() || kv.RoleDecode.Prefills() {
		t.Error("pool membership")
	}
}
