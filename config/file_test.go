package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvrouter.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each setting comes from the highest of flag > environment > file >
// default that gives it; lists from a higher level replace, not extend.
func TestPrecedenceFlagsEnvFileDefaults(t *testing.T) {
	file := writeConfig(t, "block-size: 32\nrouter-temperature: 0.25\ncluster-join: [a:1, b:2]\n"+
		"decision-timeout: 400ms\nuse-kv-events: false\nhttp-addr: 127.0.0.1:7000\n")
	type want struct {
		blockSize int
		temp      float64
		models    []string
		decision  time.Duration
		events    bool
		httpAddr  string
	}
	d := Default()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want want
	}{
		{"defaults only", nil, nil, want{d.BlockSize, d.RouterTemperature, nil, d.DecisionTimeout, true, d.HTTPAddr}},
		{"file over defaults", []string{"--config", file}, nil,
			want{32, 0.25, []string{"a:1", "b:2"}, 400 * time.Millisecond, false, "127.0.0.1:7000"}},
		{"env over file", []string{"--config", file},
			map[string]string{"KVROUTER_BLOCK_SIZE": "48", "KVROUTER_CLUSTER_JOIN": "c:3", "KVROUTER_USE_KV_EVENTS": "true"},
			want{48, 0.25, []string{"c:3"}, 400 * time.Millisecond, true, "127.0.0.1:7000"}},
		{"flags over env over file", []string{"--config=" + file, "--block-size", "64", "--cluster-join", "d:4", "--cluster-join", "e:5"},
			map[string]string{"KVROUTER_BLOCK_SIZE": "48", "KVROUTER_ROUTER_TEMPERATURE": "0.5"},
			want{64, 0.5, []string{"d:4", "e:5"}, 400 * time.Millisecond, false, "127.0.0.1:7000"}},
		{"file named by the environment", nil, map[string]string{"KVROUTER_CONFIG": file},
			want{32, 0.25, []string{"a:1", "b:2"}, 400 * time.Millisecond, false, "127.0.0.1:7000"}},
		{"the flag's file over the environment's", []string{"--config", file},
			map[string]string{"KVROUTER_CONFIG": filepath.Join(t.TempDir(), "absent.yaml")},
			want{32, 0.25, []string{"a:1", "b:2"}, 400 * time.Millisecond, false, "127.0.0.1:7000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(tc.args, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			got := want{cfg.BlockSize, cfg.RouterTemperature, cfg.ClusterJoin, cfg.DecisionTimeout, cfg.UseKVEvents, cfg.HTTPAddr}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string // all in the error
	}{
		{"unknown key", "block-size: 16\n\nblok-size: 32\n", []string{"line 3", `unknown key "blok-size"`}},
		{"integer given a word", "block-size: sixteen\n", []string{"line 1", `"block-size"`, "want an int"}},
		{"integer given a quoted number", "block-size: \"16\"\n", []string{`"block-size"`, "got the string"}},
		{"bool given yes", "proxy: yes\n", []string{`"proxy"`, "want a bool"}},
		{"duration without unit", "decision-timeout: 250\n", []string{`"decision-timeout"`, "want a duration"}},
		{"scalar given a list", "http-addr: [a, b]\n", []string{`"http-addr"`, "want a string, got a sequence"}},
		{"list given a mapping", "served-model: {a: b}\n", []string{`"served-model"`, "want a list"}},
		{"list of mappings", "served-model:\n  - a: b\n", []string{`"served-model"`, "line 2", "list of strings"}},
		{"null value", "tokenizer:\n", []string{`"tokenizer"`, "no value"}},
		{"key given twice", "block-size: 16\nblock-size: 32\n", []string{"line 2", "given again", "line 1"}},
		{"env-only secret", "nats-password: hunter2\n", []string{`"nats-password"`, "KVROUTER_NATS_PASSWORD"}},
		{"a file naming a file", "config: other.yaml\n", []string{`"config"`}},
		{"not a mapping", "- block-size\n", []string{"want a mapping"}},
		{"two documents", "block-size: 16\n---\nblock-size: 32\n", []string{"second YAML document"}},
		{"not YAML", "block-size: [16\n", []string{"yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeConfig(t, tc.body)
			_, err := Load([]string{"--config", file}, func(string) string { return "" })
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range append(tc.want, file) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	if _, err := Load([]string{"--config", absent}, func(string) string { return "" }); err == nil {
		t.Error("a missing config file must be an error")
	}
	if _, err := LoadWithOutput([]string{"--config", absent, "-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h with a missing config file: %v, want the help", err)
	}
}

// An empty or comment-only file sets nothing; every flag's default
// written back as its YAML value loads to the defaults (the file and the
// flags parse values alike).
func TestConfigFileRoundTripsDefaults(t *testing.T) {
	var b strings.Builder
	b.WriteString("# only comments\n")
	if _, err := Load([]string{"--config", writeConfig(t, b.String())}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	for _, f := range Flags() {
		if f.Default == "" || f.Name == "config" {
			continue
		}
		b.WriteString(f.Name + ": " + f.Default + "\n")
	}
	cfg, err := Load([]string{"--config", writeConfig(t, b.String())}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConfigFile = ""
	if d := Default(); !reflect.DeepEqual(cfg, d) {
		t.Fatalf("defaults written to a file did not load back as the defaults:\n%+v\n%+v", cfg, d)
	}
}

func TestEveryFlagHasAKnownGroup(t *testing.T) {
	by, err := FlagsByGroup()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range Groups {
		if len(by[g.Name]) == 0 {
			t.Errorf("group %s has no flags", g.Name)
		}
		n += len(by[g.Name])
	}
	if n != len(Flags()) || n < 126 {
		t.Fatalf("%d flags grouped of %d", n, len(Flags()))
	}
}

// serve -h: groups as headings, real type names, no flag typed "value".
func TestHelpIsGroupedWithTypes(t *testing.T) {
	var out strings.Builder
	_, err := LoadWithOutput([]string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, g := range Groups {
		if !strings.Contains(help, "\n"+g.Title+":\n") {
			t.Errorf("help lacks the group heading %q", g.Title)
		}
	}
	for _, want := range []string{"  --block-size int\n", "  --decision-timeout duration\n", "  --router-temperature float\n",
		"  --served-model list\n", "  --http-addr string\n", "  --proxy\n", "  --max-num-batched-tokens uint\n",
		"(default 16; env KVROUTER_BLOCK_SIZE)"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if strings.Contains(help, " value\n") {
		t.Error("a flag is still typed value")
	}
	// Essentials come first, before any other group.
	if strings.Index(help, "Essentials:") > strings.Index(help, "Cluster:") {
		t.Error("Essentials is not the first group")
	}
}

func TestLogFormatJSON(t *testing.T) {
	var out strings.Builder
	cfg := Default()
	cfg.LogFormat = LogFormatJSON
	log, err := cfg.NewLogger(&out)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("kvrouter serving", "http", "127.0.0.1:8080", "workers", 3)
	var line map[string]any
	if err := json.Unmarshal([]byte(out.String()), &line); err != nil {
		t.Fatalf("log line %q is not JSON: %v", out.String(), err)
	}
	if line["msg"] != "kvrouter serving" || line["level"] != "INFO" || line["http"] != "127.0.0.1:8080" || line["workers"] != 3.0 {
		t.Fatalf("log line %v", line)
	}
	if _, err := Load([]string{"--log-format", "xml"}, func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "log-format") {
		t.Fatalf("--log-format xml: %v, want an error naming log-format", err)
	}
	cfg = Default()
	out.Reset()
	log, _ = cfg.NewLogger(&out)
	log.Info("hello")
	if !strings.Contains(out.String(), "level=INFO msg=hello") {
		t.Fatalf("the default format is not text: %q", out.String())
	}
}

// Any file content gives a config or an error, never a panic; a file the
// loader accepts leaves every field it does not name at its default.
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		"block-size: 32\nserved-model: [a=/m, b=/n]\n", "decision-timeout: 250ms\nproxy: false\n",
		"cluster-join: a:1,b:2\n", "tokenizer:\n", "- x\n", "a: &x 1\nb: *x\n", "block-size: !!binary AAAA\n",
		"{block-size: 1, block-size: 2}", "---\n---\n", "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Default()
		if err := applyYAML(&cfg, data); err != nil {
			return
		}
		if !bytes.Contains(data, []byte("http")) && !bytes.ContainsRune(data, '\\') && cfg.HTTPAddr != Default().HTTPAddr {
			t.Fatalf("http-addr changed by a file that does not name it: %q", data)
		}
	})
}
