package actors

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kvrouter/decide"
)

// policyPipelines builds the pipelines of decide/testdata/policies/name.
func policyPipelines(t *testing.T, name string) (decide.Pipeline, map[string]decide.Pipeline) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "decide", "testdata", "policies", name))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := decide.ParsePolicy(data)
	if err != nil {
		t.Fatal(err)
	}
	def, models, err := pol.Pipelines()
	if err != nil {
		t.Fatal(err)
	}
	if len(def.Scorers) == 0 {
		t.Fatalf("%s built an empty default pipeline", name)
	}
	return def, models
}
