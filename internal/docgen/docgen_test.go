package docgen

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const root = "../.."

// checkDoc fails when the committed file differs from what the generator
// renders now.
func checkDoc(t *testing.T, path string, gen func(string) (string, error)) {
	t.Helper()
	want, err := gen(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatalf("%v: run `make docs`", err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date with the code: run `make docs` and commit the result\n%s", path, firstDiff(string(got), want))
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n committed: " + a + "\n generated: " + b
		}
	}
	return ""
}

func TestMetricsDocUpToDate(t *testing.T) { checkDoc(t, "docs/metrics.md", Metrics) }

func TestGRPCDocUpToDate(t *testing.T) { checkDoc(t, "docs/grpc-api.md", GRPC) }

func TestHTTPDocUpToDate(t *testing.T) { checkDoc(t, "docs/http-api.md", HTTP) }

// The state metrics come from a source scan; these names are reported by
// components only at run time and must be in the generated reference.
func TestMetricsDocListsComponentMetrics(t *testing.T) {
	doc, err := Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `kvrouter_kv_events_dropped_total` | counter | `reason` |",
		"| `kvrouter_kv_event_unknown_fields_total` | counter | `source` |",
		"| `kvrouter_index_trust` | gauge | `dp_rank`, `worker_id` |",
		"| `kvrouter_index_trust_to_untrusted_total` | counter | `source` |",
		"| `kvrouter_index_stored_blocks_total` | counter | `source` |",
		"| `kvrouter_parity_ratio` | gauge | `model` |",
		"| `kvrouter_parity_unconfirmed_hit_ratio` | gauge | `dp_rank`, `worker_id` |",
		"| `kvrouter_gossip_events_sent_total` | counter | `source` |",
		"| `kvrouter_zmq_replays_total` | counter | `source` |",
		"| `kvrouter_engine_kv_usage` | gauge | `dp_rank`, `worker_id` |",
		"| `kvrouter_nats_connected` | gauge |  |",
		"| `kvrouter_ready` | gauge |  |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("metrics doc lacks %q", want)
		}
	}
	if strings.Contains(doc, "| `go_") || strings.Contains(doc, "| `process_") {
		t.Error("the Go runtime and process collectors are listed one by one")
	}
}

func writeGo(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestScanStateNames(t *testing.T) {
	dir := writeGo(t, `package replica
import "github.com/kvrouter/kvrouter/metrics"
func add(st *metrics.State, x uint64, reason string) {
	st.Counters = append(st.Counters, metrics.Counter{Name: "lit", Source: "s", Value: x})
	for name, v := range map[string]uint64{"a": x, "b": x} {
		st.Counters = append(st.Counters, metrics.Counter{Name: name, Source: "s", Value: v})
	}
	st.Counters = append(st.Counters, metrics.Counter{Name: "index_" + reason, Source: "s"})
	st.Gauges["g"] = 1
	st.WorkerGauges = append(st.WorkerGauges, metrics.WorkerGauge{Name: "wg", Help: "wg help"})
	h := func(name, help string, v float64) {
		st.WorkerGauges = append(st.WorkerGauges, metrics.WorkerGauge{Name: name, Help: help, Value: v})
	}
	h("viahelper", "helper help", 1)
}
`)
	got, err := scanStateNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"lit", "a", "b", "index_stored_blocks", "index_expired"} {
		if !got.counters[c] {
			t.Errorf("counter %q not found: %v", c, got.counters)
		}
	}
	if !got.gauges["g"] {
		t.Errorf("gauge g not found: %v", got.gauges)
	}
	if got.workerGauges["wg"] != "wg help" || got.workerGauges["viahelper"] != "helper help" {
		t.Errorf("worker gauges: %v", got.workerGauges)
	}
}

// A name the scan cannot resolve fails the generation instead of being
// left out of the docs.
func TestScanStateNamesRefusesUnresolvedNames(t *testing.T) {
	for name, body := range map[string]string{
		"computed counter": `st.Counters = append(st.Counters, metrics.Counter{Name: n})`,
		"unknown prefix":   `st.Counters = append(st.Counters, metrics.Counter{Name: "other_" + n})`,
		"computed gauge":   `st.Gauges[n] = 1`,
		"computed worker":  `st.WorkerGauges = append(st.WorkerGauges, metrics.WorkerGauge{Name: n + "x"})`,
	} {
		dir := writeGo(t, `package replica
import "github.com/kvrouter/kvrouter/metrics"
func add(st *metrics.State, n string) {
	`+body+`
}
`)
		if _, err := scanStateNames(dir); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseProto(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.proto")
	src := `// File doc.
syntax = "proto3";

package p.v1;

// S doc.
service S {
  // M doc.
  rpc M(stream A) returns (B);
}

// A doc.
message A {
  // f doc.
  repeated uint32 f = 1;
  map<string, uint64> m = 2; // trailing doc
  oneof call {
    B b = 3;
  }
  message In {
    int32 x = 1;
  }
  reserved 4;
}

enum E {
  E_UNSPECIFIED = 0;
}
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pf, err := parseProto(path)
	if err != nil {
		t.Fatal(err)
	}
	if pf.Package != "p.v1" || paragraph(pf.Doc) != "File doc." {
		t.Errorf("file: %q %q", pf.Package, pf.Doc)
	}
	r := pf.Services[0].RPCs[0]
	if r.Name != "M" || !r.ClientStream || r.ServerStream || r.Request != "A" || r.Response != "B" || paragraph(r.Doc) != "M doc." {
		t.Errorf("rpc: %+v", r)
	}
	a := pf.Messages[0]
	if a.Name != "A" || len(a.Fields) != 3 {
		t.Fatalf("message A: %+v", a)
	}
	if f := a.Fields[0]; f.Label != "repeated" || f.Type != "uint32" || f.Number != "1" || paragraph(f.Doc) != "f doc." {
		t.Errorf("field f: %+v", f)
	}
	if f := a.Fields[1]; f.Type != "map<string, uint64>" || paragraph(f.Doc) != "trailing doc" {
		t.Errorf("field m: %+v", f)
	}
	if f := a.Fields[2]; f.Oneof != "call" || f.Type != "B" {
		t.Errorf("field b: %+v", f)
	}
	if pf.Messages[1].Name != "A.In" || pf.Messages[2].Kind != "enum" || pf.Messages[2].Fields[0].Name != "E_UNSPECIFIED" {
		t.Errorf("nested/enum: %+v %+v", pf.Messages[1], pf.Messages[2])
	}
}

// Lines the parser does not understand fail the generation.
func TestParseProtoRefusesUnknownSyntax(t *testing.T) {
	for name, body := range map[string]string{
		"extensions": "message A {\n  extensions 100 to 199;\n}\n",
		"block":      "/* doc */\nmessage A {\n}\n",
		"unclosed":   "message A {\n  int32 x = 1;\n",
		"group":      "message A {\n  optional group G = 1 {\n  }\n}\n",
	} {
		path := filepath.Join(t.TempDir(), "x.proto")
		if err := os.WriteFile(path, []byte("syntax = \"proto3\";\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := parseProto(path); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
