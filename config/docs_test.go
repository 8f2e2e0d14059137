package config

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// docs/configuration.md is generated from the flag definitions; a flag
// added, renamed, regrouped or given a new default or help without
// regenerating it fails here.
func TestConfigurationDocIsCurrent(t *testing.T) {
	committed, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	var now bytes.Buffer
	if err := WriteMarkdown(&now); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, now.Bytes()) {
		c, n := strings.Split(string(committed), "\n"), strings.Split(now.String(), "\n")
		for i := 0; i < len(c) || i < len(n); i++ {
			var a, b string
			if i < len(c) {
				a = c[i]
			}
			if i < len(n) {
				b = n[i]
			}
			if a != b {
				t.Fatalf("docs/configuration.md differs from the flag definitions (run make docs); first difference on line %d:\ncommitted: %s\ngenerated: %s", i+1, a, b)
			}
		}
	}
}

// Every flag has a row under its group's heading in the generated file.
func TestConfigurationDocListsEveryFlag(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, f := range Flags() {
		if !strings.Contains(doc, "| `--"+f.Name+"` | "+f.Type+" | ") {
			t.Errorf("no row for --%s", f.Name)
		}
	}
}

// The YAML example at the top of the reference is a file the loader
// accepts.
func TestConfigurationDocExampleLoads(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	start := strings.Index(doc, "```yaml\n")
	end := strings.Index(doc[start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no yaml example")
	}
	cfg := Default()
	if err := applyYAML(&cfg, []byte(doc[start+8:start+8+end])); err != nil {
		t.Fatalf("the documented example does not load: %v", err)
	}
	if cfg.LogFormat != LogFormatJSON || len(cfg.StaticWorkers) != 2 {
		t.Fatalf("example loaded as %+v", cfg)
	}
}
