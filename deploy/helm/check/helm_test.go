// Package check runs `helm lint --strict` and `helm template` on
// deploy/helm/kvrouter through Helm's Go packages (pkg/lint, pkg/engine,
// pkg/chart/loader), in a module of its own so the router's module does
// not depend on Helm: `cd deploy/helm/check && go test ./...`. It
// compiles 536 packages where the helm CLI compiles 965.
package check

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

const chartDir = "../kvrouter"

func valueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	allOn, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", "all-on-values.yaml"))
	if err != nil {
		t.Fatalf("read all-on values: %v", err)
	}
	return map[string]map[string]any{"defaults": {}, "all-on": allOn.AsMap()}
}

// TestLintStrict is `helm lint --strict`: every message of warning
// severity or above fails.
func TestLintStrict(t *testing.T) {
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			res := lint.All(chartDir, vals, "default", true)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("%s", m.Error())
				}
			}
		})
	}
}

// TestTemplate is `helm template`: the chart renders with both value sets.
func TestTemplate(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			opts := chartutil.ReleaseOptions{Name: "kvrouter", Namespace: "default", Revision: 1, IsInstall: true}
			top, err := chartutil.ToRenderValues(ch, vals, opts, chartutil.DefaultCapabilities)
			if err != nil {
				t.Fatalf("values: %v", err)
			}
			out, err := engine.Render(ch, top)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if len(out) == 0 {
				t.Fatal("no manifests rendered")
			}
			if dir := os.Getenv("HELM_RENDER_OUT"); dir != "" {
				writeRendered(t, filepath.Join(dir, name+".yaml"), out)
			}
		})
	}
}

// writeRendered writes the manifests as `helm template` prints them (one
// document per template, in name order, NOTES.txt left out), for the
// router module's strict decoding (TestHelmTemplateStrict with
// HELM_RENDERED).
func writeRendered(t *testing.T, path string, out map[string]string) {
	t.Helper()
	names := make([]string, 0, len(out))
	for n := range out {
		if !strings.HasSuffix(n, ".yaml") || strings.TrimSpace(out[n]) == "" {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString("---\n# Source: " + n + "\n" + out[n] + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatalf("write rendered manifests: %v", err)
	}
}
