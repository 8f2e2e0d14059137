package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/discovery"
)

const chartDir = "helm/kvrouter"

// chartMeta is Chart.yaml as Helm v3 reads it (the fields the chart uses);
// a misspelt or unexpected key fails the strict decode.
type chartMeta struct {
	APIVersion  string   `json:"apiVersion"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Type        string   `json:"type"`
	Version     string   `json:"version"`
	AppVersion  string   `json:"appVersion"`
	Home        string   `json:"home"`
	Sources     []string `json:"sources"`
	Keywords    []string `json:"keywords"`
}

// leaves lists the dotted paths of a values tree, maps included (a
// template may use a map whole, e.g. resources or labels).
func leaves(prefix string, v any, out map[string]bool) {
	if prefix != "" {
		out[prefix] = true
	}
	if m, ok := v.(map[string]any); ok {
		for k, c := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			leaves(p, c, out)
		}
	}
}

func strictValues(t *testing.T, path string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, path)), &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// The chart without Helm: Chart.yaml and values files decode strictly,
// every .Values path a template names exists in values.yaml, every value
// is used by some template, CI's values override only existing keys, and
// the engine examples carry the images the plain manifests pin.
func TestHelmChart(t *testing.T) {
	var meta chartMeta
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, filepath.Join(chartDir, "Chart.yaml"))), &meta); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	semver := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	if meta.APIVersion != "v2" || meta.Name != "kvrouter" || meta.Type != "application" || !semver.MatchString(meta.Version) || meta.AppVersion == "" {
		t.Errorf("Chart.yaml: %+v", meta)
	}

	values := strictValues(t, filepath.Join(chartDir, "values.yaml"))
	defined := map[string]bool{}
	leaves("", values, defined)

	templates, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("no templates: %v", err)
	}
	ref := regexp.MustCompile(`\.Values((?:\.[A-Za-z][A-Za-z0-9]*)+)`)
	used := map[string]bool{}
	for _, f := range templates {
		src := mustRead(t, f)
		for _, m := range ref.FindAllStringSubmatch(src, -1) {
			p := strings.TrimPrefix(m[1], ".")
			if !defined[p] {
				t.Errorf("%s: .Values.%s is not in values.yaml", filepath.Base(f), p)
			}
			for q := p; q != ""; {
				used[q] = true
				i := strings.LastIndex(q, ".")
				if i < 0 {
					break
				}
				q = q[:i]
			}
		}
	}
	// The engine examples read their fields relative to
	// `with .Values.engines.<engine>`.
	bare := regexp.MustCompile(`(?:^|[\s({])\.([a-z][A-Za-z0-9]*)\b`)
	engines := mustRead(t, filepath.Join(chartDir, "templates", "engines.yaml"))
	for _, m := range bare.FindAllStringSubmatch(engines, -1) {
		for _, e := range []string{"vllm", "sglang"} {
			p := "engines." + e + "." + m[1]
			if !defined[p] {
				t.Errorf("engines.yaml: .%s is not in values.yaml under engines.%s", m[1], e)
			}
			used[p] = true
		}
	}
	// A map rendered whole (toYaml) uses everything under it.
	whole := regexp.MustCompile(`toYaml \.Values((?:\.[A-Za-z][A-Za-z0-9]*)+)`)
	for _, f := range templates {
		for _, m := range whole.FindAllStringSubmatch(mustRead(t, f), -1) {
			for p := range defined {
				if strings.HasPrefix(p, strings.TrimPrefix(m[1], ".")+".") {
					used[p] = true
				}
			}
		}
	}
	var unused []string
	for p := range defined {
		if !used[p] {
			unused = append(unused, p)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("values no template reads: %v", unused)
	}

	ciFiles, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if len(ciFiles) == 0 {
		t.Error("no ci/*.yaml values: make helm-check renders only the defaults")
	}
	for _, f := range ciFiles {
		override := map[string]bool{}
		leaves("", strictValues(t, f), override)
		for p := range override {
			if !defined[p] && !strings.Contains(p, "labels.") {
				t.Errorf("%s sets %s, which values.yaml does not define", filepath.Base(f), p)
			}
		}
	}

	image := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`)
	eng := values["engines"].(map[string]any)
	for e, manifest := range map[string]string{"vllm": "k8s/vllm.yaml", "sglang": "k8s/sglang.yaml"} {
		want := image.FindStringSubmatch(mustRead(t, manifest))[1]
		if got := eng[e].(map[string]any)["image"]; got != want {
			t.Errorf("chart engines.%s.image %v, %s pins %s", e, got, manifest, want)
		}
	}
}

// `helm template` output (HELM=path to a helm binary, as make helm-check
// sets it) decodes strictly, for the default values and CI's all-on
// values, and the router's discovery URI parses.
func TestHelmTemplateStrict(t *testing.T) {
	bin, rendered := os.Getenv("HELM"), os.Getenv("HELM_RENDERED")
	if bin == "" && rendered == "" {
		t.Skip("set HELM to a helm binary (make helm-check) or HELM_RENDERED to deploy/helm/check's output (make ci)")
	}
	for i, extra := range [][]string{nil, {"-f", filepath.Join(chartDir, "ci", "all-on-values.yaml")}} {
		var out []byte
		var err error
		if rendered != "" {
			out, err = os.ReadFile(filepath.Join(rendered, []string{"defaults", "all-on"}[i]+".yaml"))
		} else {
			out, err = exec.Command(bin, append([]string{"template", "kvrouter", chartDir}, extra...)...).Output()
		}
		if err != nil {
			t.Fatalf("helm template %v: %v", extra, err)
		}
		kinds := map[string]int{}
		for _, o := range decodeStrict(t, "helm template", out) {
			kinds[o.GetObjectKind().GroupVersionKind().Kind]++
			if d, ok := o.(*appsv1.Deployment); ok && d.Name == "kvrouter" {
				uri := strings.ReplaceAll(env(d.Spec.Template.Spec.Containers[0], "KVROUTER_DISCOVER"), "$(POD_NAMESPACE)", "inference")
				if _, err := discovery.Parse(uri, discovery.Options{Interval: 1}); err != nil {
					t.Errorf("values %v: KVROUTER_DISCOVER %q: %v", extra, uri, err)
				}
			}
		}
		for _, k := range []string{"Deployment", "Service", "Secret", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount"} {
			if kinds[k] == 0 {
				t.Errorf("values %v: no %s rendered (%v)", extra, k, kinds)
			}
		}
	}
}
