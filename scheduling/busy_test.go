package scheduling

import "testing"

func TestEngineBusy(t *testing.T) {
	both := BusyThresholds{KVUsage: 0.85, Waiting: 32}
	off := BusyThresholds{KVUsage: -1, Waiting: -1}
	tests := []struct {
		name string
		l    EngineLoad
		t    BusyThresholds
		want bool
	}{
		{"idle", EngineLoad{}, both, false},
		{"waiting at the threshold", EngineLoad{Waiting: 32}, both, false},
		{"waiting over", EngineLoad{Waiting: 33}, both, true},
		{"kv usage at the threshold", EngineLoad{KVUsage: 0.85, HasKVUsage: true}, both, false},
		{"kv usage over", EngineLoad{KVUsage: 0.9, HasKVUsage: true}, both, true},
		{"kv usage not reported", EngineLoad{KVUsage: 0.9}, both, false},
		{"running alone never busy", EngineLoad{Running: 1e6}, both, false},
		{"disabled", EngineLoad{Waiting: 1e6, KVUsage: 1, HasKVUsage: true}, off, false},
		{"only waiting enabled", EngineLoad{Waiting: 1e6, KVUsage: 1, HasKVUsage: true}, BusyThresholds{KVUsage: -1, Waiting: 1e6}, false},
		{"threshold 0: any waiting", EngineLoad{Waiting: 1}, BusyThresholds{KVUsage: -1, Waiting: 0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EngineBusy(tt.l, tt.t); got != tt.want {
				t.Fatalf("EngineBusy(%+v, %+v) = %v, want %v", tt.l, tt.t, got, tt.want)
			}
		})
	}
	if off.Enabled() || !both.Enabled() {
		t.Fatal("Enabled")
	}
}
