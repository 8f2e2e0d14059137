package docgen

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Words that look like metric names but are not: kvbench policies
// (kvrouter_dynamo, kvrouter_approx, and kvrouter_ttft, the refused old
// name of the ttft cost's policy), and fields of GET /v1/models.
var notMetrics = map[string]bool{"kvrouter_dynamo": true, "kvrouter_ttft": true, "kvrouter_approx": true, "kvrouter_tokenization": true, "kvrouter_parity": true}

var metricWord = regexp.MustCompile(`kvrouter_[a-z0-9_]+`)
var tableName = regexp.MustCompile("(?m)^\\| `(kvrouter_[a-z0-9_]+)` \\| (\\w+) \\|")

// TestDocsNameRealMetrics fails when a hand-written document, dashboard or
// scrape configuration names a metric the router does not export (a
// rename the prose missed). Histogram series (_bucket, _sum, _count) and
// prefixes (kvrouter_cluster_*) count when a metric matches.
func TestDocsNameRealMetrics(t *testing.T) {
	doc, err := Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, m := range tableName.FindAllStringSubmatch(doc, -1) {
		kinds[m[1]] = m[2]
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md", "*.json", "*.yml", "*.yaml").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if f == "docs/metrics.md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree
		}
		for _, name := range metricWord.FindAllString(string(b), -1) {
			if !exportedName(name, kinds) {
				t.Errorf("%s names %s, which the router does not export (docs/metrics.md)", f, name)
			}
		}
	}
}

func exportedName(name string, kinds map[string]string) bool {
	if notMetrics[name] || kinds[name] != "" {
		return true
	}
	if strings.HasSuffix(name, "_") {
		for k := range kinds {
			if strings.HasPrefix(k, name) {
				return true
			}
		}
		return false
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && kinds[base] == "histogram" {
			return true
		}
	}
	return false
}
