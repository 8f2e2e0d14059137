package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-27T15:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	tagged := &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "v1.4.0"}}
	for _, tc := range []struct {
		name       string
		bi         *debug.BuildInfo
		override   string
		short, str string
	}{
		{"vcs stamped checkout", stamped, "", "devel-0123456789ab-dirty",
			"(devel) (revision 0123456789ab, modified, 2026-11-27T15:00:00Z) go1.25.0"},
		{"ldflags override", stamped, "v2.0.0", "v2.0.0-dirty",
			"v2.0.0 (revision 0123456789ab, modified, 2026-11-27T15:00:00Z) go1.25.0"},
		{"module version (go install @v1.4.0)", tagged, "", "v1.4.0", "v1.4.0 go1.25.0"},
		{"no build info", nil, "", "devel", "(devel)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := FromBuildInfo(tc.bi, tc.override)
			if got := i.Short(); got != tc.short {
				t.Errorf("Short() = %q, want %q", got, tc.short)
			}
			if got := i.String(); got != tc.str {
				t.Errorf("String() = %q, want %q", got, tc.str)
			}
		})
	}
}

// The running test binary carries real build info: its Go version must
// come through (the stamping path, not a constant).
func TestGetReadsThisBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("test binary has no build info")
	}
	if got := Get().GoVersion; got != bi.GoVersion {
		t.Fatalf("Get().GoVersion = %q, want %q", got, bi.GoVersion)
	}
}
