package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/version"
)

func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"-h"}, "commands:"},
		{[]string{"--help"}, "commands:"},
		{[]string{"help"}, "commands:"},
		{[]string{"--version"}, "kvrouter " + version.Get().String()},
		{[]string{"version"}, "kvrouter " + version.Get().String()},
	} {
		var out, errOut bytes.Buffer
		if err := run(tc.args, &out, &errOut); err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%v: stdout %q does not contain %q", tc.args, out.String(), tc.want)
		}
	}
}

func TestVersionOverride(t *testing.T) {
	defer func(o string) { version.Override = o }(version.Override)
	version.Override = "v9.8.7"
	var out bytes.Buffer
	if err := run([]string{"--version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "kvrouter v9.8.7") {
		t.Fatalf("--version printed %q, want the -ldflags override v9.8.7", out.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"serv"}, &out, &errOut); err == nil || !strings.Contains(errOut.String(), "commands:") {
		t.Fatalf("run(serv) = %v, stderr %q: want an error and the usage", err, errOut.String())
	}
}

// serve -h and --help exit 0 and print the flags under their groups.
func TestServeHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		if err := run([]string{"serve", arg}, &out, &errOut); err != nil {
			t.Fatalf("serve %s: %v, want success", arg, err)
		}
		for _, want := range []string{"Essentials:", "Cluster:", "Security:", "Routing:", "Limits:", "Tuning:", "  --block-size int"} {
			if !strings.Contains(errOut.String(), want) {
				t.Errorf("serve %s lacks %q", arg, want)
			}
		}
	}
}
