package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyFileBuildsThePipelines(t *testing.T) {
	none := func(string) string { return "" }
	c, err := Load([]string{"--policy-file", "../decide/testdata/policies/lora.yaml"}, none)
	if err != nil {
		t.Fatal(err)
	}
	ac := c.Actors()
	if _, ok := ac.Models["llama-3-8b-lora"]; !ok || len(ac.Models) != 1 {
		t.Fatalf("models %v, want the lora model's pipeline", ac.Models)
	}
	if ac.Pipeline.Picker == nil || len(ac.Pipeline.Scorers) != 1 {
		t.Fatalf("default pipeline %+v, want the file's default", ac.Pipeline)
	}
	d, err := Load(nil, none)
	if err != nil {
		t.Fatal(err)
	}
	if ac := d.Actors(); ac.Models != nil || ac.Pipeline.Picker != nil {
		t.Fatalf("no policy file built a pipeline: %+v", ac.Pipeline)
	}
}

func TestPolicyFileErrorsStopTheStart(t *testing.T) {
	none := func(string) string { return "" }
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"unknown plugin": {"default:\n  scorers:\n    - {plugin: cheapest, weight: 1}\n", `line 3: unknown plugin "cheapest"`},
		"bad weight":     {"models:\n  m:\n    scorers:\n      - {plugin: cost, weight: -1}\n", `line 4: weight -1`},
		"unknown key":    {"default:\n  picker: temperature\nmodel: {}\n", `line 3: unknown key "model"`},
		"zero weights":   {"default:\n  scorers:\n    - {plugin: cost, weight: 0}\n", "line 3: scorers: a pipeline needs a scorer with a positive weight"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load([]string{"--policy-file", path}, none)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want one naming %s and %q", err, path, tc.want)
			}
		})
	}
	if _, err := Load([]string{"--policy-file", filepath.Join(dir, "absent.yaml")}, none); err == nil {
		t.Fatal("a missing policy file was accepted")
	}
	if _, err := Load([]string{"--decision-sample", "1.5"}, none); err == nil {
		t.Fatal("decision-sample 1.5 was accepted")
	}
}
