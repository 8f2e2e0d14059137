// Package version names the build a binary came from: a release tag set
// with -ldflags, else the module version and the VCS revision Go stamps
// into every binary built from a checkout (runtime/debug.ReadBuildInfo).
package version

import (
	"runtime/debug"
	"strings"
)

// Override, when set at link time, is the version every binary reports:
//
//	go build -ldflags "-X github.com/kvrouter/kvrouter/internal/version.Override=v1.2.0" ./cmd/kvrouter
var Override string

// Info is what a binary knows about its build.
type Info struct {
	Version   string // Override, or the main module's version ("(devel)" for a checkout)
	Revision  string // vcs.revision, empty when built without VCS stamping (-buildvcs=false)
	Time      string // vcs.time (the commit's time, RFC 3339)
	Modified  bool   // vcs.modified: the work tree had uncommitted changes
	GoVersion string
}

// Get reads this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi, Override)
}

// FromBuildInfo extracts Info from bi (nil when the binary carries none);
// a non-empty override replaces the module version.
func FromBuildInfo(bi *debug.BuildInfo, override string) Info {
	var info Info
	if bi != nil {
		info.Version, info.GoVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if override != "" {
		info.Version = override
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// Short is the one-word version peers see in cluster metadata: the
// version, plus the revision's first 12 characters for a development
// build, plus "-dirty" for a modified work tree.
func (i Info) Short() string {
	s := i.Version
	if s == "(devel)" {
		s = "devel"
		if i.Revision != "" {
			s += "-" + shortRev(i.Revision)
		}
	}
	if i.Modified {
		s += "-dirty"
	}
	return s
}

// String is the line `kvrouter --version` prints.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	if i.Revision != "" {
		b.WriteString(" (revision " + shortRev(i.Revision))
		if i.Modified {
			b.WriteString(", modified")
		}
		if i.Time != "" {
			b.WriteString(", " + i.Time)
		}
		b.WriteString(")")
	}
	if i.GoVersion != "" {
		b.WriteString(" " + i.GoVersion)
	}
	return b.String()
}

func shortRev(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}
