package decide

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParsePolicyExamples(t *testing.T) {
	for _, tc := range []struct {
		file   string
		def    Spec
		models map[string]Spec
	}{
		{file: "default.yaml", def: DefaultSpec()},
		{file: "lora.yaml", def: DefaultSpec(), models: map[string]Spec{"llama-3-8b-lora": {
			Admitter: "queue-threshold", Filters: []string{"session-affinity"}, Picker: "temperature",
			Scorers: []WeightedName{{Name: "cost-ttft", Weight: 1}, {Name: "lora-affinity", Weight: 0.05}}}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile("testdata/policies/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			pol, err := ParsePolicy(data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pol.Default, tc.def) {
				t.Errorf("default = %+v, want %+v", pol.Default, tc.def)
			}
			if !reflect.DeepEqual(pol.Models, tc.models) {
				t.Errorf("models = %+v, want %+v", pol.Models, tc.models)
			}
			if _, _, err := pol.Pipelines(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestParsePolicyEmpty(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n"} {
		pol, err := ParsePolicy([]byte(in))
		if err != nil || !reflect.DeepEqual(pol.Default, DefaultSpec()) || pol.Models != nil {
			t.Errorf("%q: %+v, %v; want the default pipeline", in, pol, err)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unknown top key", "defaults:\n  picker: temperature\n", "line 1: unknown key \"defaults\""},
		{"unknown stage key", "default:\n  pickers: temperature\n", "line 2: unknown key \"pickers\""},
		{"unknown scorer", "default:\n  scorers:\n    - {plugin: prefix, weight: 1}\n", "line 3: unknown plugin \"prefix\""},
		{"unknown filter", "default:\n  filters: [session-affinity, busy]\n", "line 2: unknown plugin \"busy\""},
		{"unknown admitter", "default:\n  admitter: always\n", "line 2: unknown plugin \"always\""},
		{"unknown picker", "default:\n  picker: random\n", "line 2: unknown plugin \"random\""},
		{"negative weight", "default:\n  scorers:\n    - plugin: cost\n      weight: -1\n", "line 4: weight -1"},
		{"string weight", "default:\n  scorers:\n    - plugin: cost\n      weight: \"2\"\n", "line 4: weight: want a number"},
		{"infinite weight", "default:\n  scorers:\n    - {plugin: cost, weight: .inf}\n", "line 3: weight .inf"},
		{"nan weight", "default:\n  scorers:\n    - {plugin: cost, weight: .nan}\n", "line 3: weight .nan"},
		{"huge weight", "default:\n  scorers:\n    - {plugin: cost, weight: 1e12}\n", "line 3: weight 1e12"},
		{"all zero", "default:\n  scorers:\n    - {plugin: cost, weight: 0}\n", "line 3: scorers: a pipeline needs a scorer with a positive weight"},
		{"no plugin", "default:\n  scorers:\n    - {weight: 1}\n", "line 3: a scorer needs a plugin name"},
		{"scorer key", "default:\n  scorers:\n    - {plugin: cost, wieght: 1}\n", "line 3: unknown key \"wieght\""},
		{"dup key", "default:\n  picker: temperature\n  picker: temperature\n", "line 3: key \"picker\" given again (first on line 2)"},
		{"dup model", "models:\n  a: {}\n  a: {}\n", "line 3: key \"a\" given again"},
		{"model error", "models:\n  m1:\n    filters: [nope]\n", "model \"m1\": line 3: unknown plugin \"nope\""},
		{"filters not list", "default:\n  filters: session-affinity\n", "line 2: filters: want a list"},
		{"not a mapping", "- default\n", "line 1: want a mapping"},
		{"two documents", "default: {}\n---\nmodels: {}\n", "a second YAML document"},
		{"bad yaml", "default: [\n", "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A model's pipeline starts from the file's default, not the built-in one.
func TestParsePolicyModelInheritsFileDefault(t *testing.T) {
	pol, err := ParsePolicy([]byte("default:\n  scorers: [{plugin: cost-ttft, weight: 1}]\nmodels:\n  m:\n    picker: temperature\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.Models["m"].Scorers; len(got) != 1 || got[0].Name != "cost-ttft" {
		t.Fatalf("model scorers = %+v, want the file default's cost-ttft", got)
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"", "default:\n  picker: temperature\n", "models:\n  m:\n    scorers: [{plugin: cost, weight: 2}]\n",
		"default: &a {picker: temperature}\nmodels: {m: *a}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pol, err := ParsePolicy(data)
		if err != nil {
			return
		}
		// What parses builds: every name was checked with its line.
		if _, _, err := pol.Pipelines(); err != nil {
			t.Fatalf("parsed but does not build: %v", err)
		}
	})
}
