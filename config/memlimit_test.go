package config

import "testing"

func TestParseMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		in    string
		bytes int64
		auto  bool
		bad   bool
	}{
		{"auto", 0, true, false},
		{"AUTO", 0, true, false},
		{"none", 0, false, false},
		{"", 0, false, false},
		{"1048576", 1 << 20, false, false},
		{"512MiB", 512 << 20, false, false},
		{"3 GiB", 3 << 30, false, false},
		{"64KiB", 64 << 10, false, false},
		{"100B", 100, false, false},
		{"0", 0, false, true},
		{"-1GiB", 0, false, true},
		{"1.5GiB", 0, false, true},
		{"lots", 0, false, true},
		{"9999999999TiB", 0, false, true}, // overflows int64
	} {
		b, auto, err := ParseMemoryLimit(tt.in)
		if (err != nil) != tt.bad || b != tt.bytes || auto != tt.auto {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v, %v; want %d, %v, bad=%v", tt.in, b, auto, err, tt.bytes, tt.auto, tt.bad)
		}
	}
}

func TestAutoMemoryLimit(t *testing.T) {
	if got := AutoMemoryLimit(0); got != 0 {
		t.Errorf("no container limit: %d, want 0 (no limit)", got)
	}
	if got := AutoMemoryLimit(10 << 30); got != 9<<30 {
		t.Errorf("10 GiB container: %d, want 9 GiB", got)
	}
}

func TestMemoryLimitValidated(t *testing.T) {
	if _, err := Load([]string{"--memory-limit", "lots"}, func(string) string { return "" }); err == nil {
		t.Fatal("a malformed memory-limit was accepted")
	}
	if _, err := Load([]string{"--gc-percent", "-5"}, func(string) string { return "" }); err == nil {
		t.Fatal("a negative gc-percent was accepted")
	}
}
