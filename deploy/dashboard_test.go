package deploy

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Version       int    `json:"version"`
	Refresh       string `json:"refresh"`
	Time          struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Label      string          `json:"label"`
			Type       string          `json:"type"`
			Datasource json.RawMessage `json:"datasource"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
			Refresh    int             `json:"refresh"`
			Sort       int             `json:"sort"`
			Current    json.RawMessage `json:"current"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          int                      `json:"id"`
		Type        string                   `json:"type"`
		Title       string                   `json:"title"`
		GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
		Datasource  json.RawMessage          `json:"datasource"`
		FieldConfig json.RawMessage          `json:"fieldConfig"`
		Targets     []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

// sourceText is the router's non-test Go source: metric names are built
// there, some from parts ("gossip_" + kind), so a name's core must appear
// as the start of a string literal.
func sourceText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.Write(raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The dashboard decodes strictly, filters every query by the instance
// variable, names replicas through the label the router exports itself
// (kvrouter_replica_info, joined on instance) rather than one a scrape
// config adds, shows parity and index trust, and queries only metrics the
// router defines.
func TestGrafanaDashboard(t *testing.T) {
	raw := []byte(mustRead(t, "observability/grafana-dashboard.json"))
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var d grafanaDashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Name == "instance" && (!strings.Contains(v.Definition, "kvrouter_replica_info") || !v.IncludeAll || v.AllValue != ".*") {
			t.Errorf("instance variable: %+v", v)
		}
	}
	if !vars["datasource"] || !vars["instance"] {
		t.Fatalf("template variables %v, want datasource and instance", vars)
	}

	src := sourceText(t)
	metric := regexp.MustCompile(`kvrouter_[a-z_]+`)
	suffix := regexp.MustCompile(`_(total|bucket|sum|count)$`)
	ids := map[int]bool{}
	queried := map[string]bool{}
	for _, p := range d.Panels {
		if p.ID == 0 || ids[p.ID] {
			t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W == 0 || p.GridPos.H == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %q: no size or no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, loc := range metric.FindAllStringIndex(tg.Expr, -1) {
				name := tg.Expr[loc[0]:loc[1]]
				queried[name] = true
				if !strings.HasPrefix(tg.Expr[loc[1]:], `{instance=~"$instance"`) {
					t.Errorf("panel %q: %s is not filtered by $instance: %s", p.Title, name, tg.Expr)
				}
				core := suffix.ReplaceAllString(strings.TrimPrefix(name, "kvrouter_"), "")
				if !strings.Contains(src, `"kvrouter_`+core) && !strings.Contains(src, `"`+core) {
					t.Errorf("panel %q: %s is defined nowhere in the router's source", p.Title, name)
				}
			}
			if strings.Contains(tg.Expr+tg.LegendFormat, "replica") &&
				!strings.Contains(tg.Expr, `* on (instance) group_left (replica) max by (instance, replica) (kvrouter_replica_info`) {
				t.Errorf("panel %q: groups by replica without joining kvrouter_replica_info: %s", p.Title, tg.Expr)
			}
		}
	}
	for _, m := range []string{"kvrouter_parity_ratio", "kvrouter_parity_engine_tokenization", "kvrouter_index_trust", "kvrouter_gossip_events_sent_total"} {
		if !queried[m] {
			t.Errorf("no panel shows %s", m)
		}
	}

	// The scrape config selects pods by label, as its comment says, and
	// adds no replica label that would shadow the router's own.
	prom := mustRead(t, "observability/prometheus.yml")
	if strings.Contains(prom, "annotat") || !strings.Contains(prom, "__meta_kubernetes_pod_label_app") {
		t.Error("prometheus.yml: pods are selected by label and the comment must say so")
	}
	if regexp.MustCompile(`target_label:\s*replica\b`).MatchString(prom) {
		t.Error("prometheus.yml sets a replica label: the router's kvrouter_replica_info would become exported_replica")
	}
}
