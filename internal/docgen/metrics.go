// Package docgen renders the reference documents that are generated from
// the code (docs/metrics.md, docs/grpc-api.md); cmd/gendocs writes them
// and the package's tests fail when a committed file differs.
package docgen

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// metricDoc is one metric family as a scrape shows it.
type metricDoc struct {
	Name, Type, Help string
	Labels           []string
}

// Families of client_golang's Go runtime and process collectors: their
// set depends on the Go version and the OS, so the docs name them once.
var standardPrefixes = []string{"go_", "process_"}

// Metrics renders docs/metrics.md. root is the repository's root: the
// replica package's source is read there for the names it reports
// through metrics.State.
func Metrics(root string) (string, error) {
	names, err := scanStateNames(filepath.Join(root, "replica"))
	if err != nil {
		return "", fmt.Errorf("scanning replica for state metrics: %w", err)
	}
	// Every counter and gauge the components report has help text of
	// its own (metrics/statehelp.go), not a generic line.
	for _, set := range []map[string]bool{names.counters, names.gauges} {
		for _, n := range sortedKeys(set) {
			if !metrics.StateHelp(n) {
				return "", fmt.Errorf("metric %s reported through metrics.State has no help text: add it to metrics/statehelp.go", n)
			}
		}
	}
	m := metrics.New()
	m.RegisterState(func(context.Context) (*metrics.State, error) { return names.state(), nil })
	m.RegisterParityState(func() metrics.ParityState {
		return metrics.ParityState{Models: []metrics.ModelParity{{Model: "x"}}, Ranks: []metrics.RankParity{{}}}
	})
	if err := m.SetReplica("replica-id"); err != nil {
		return "", fmt.Errorf("replica info: %w", err)
	}
	touch(m)
	fams, err := m.Registry.Gather()
	if err != nil {
		return "", fmt.Errorf("gathering: %w", err)
	}
	docs := map[string]metricDoc{}
	for _, f := range fams {
		if isStandard(f.GetName()) {
			continue
		}
		d := metricDoc{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		if len(f.GetMetric()) > 0 {
			for _, lp := range f.GetMetric()[0].GetLabel() {
				d.Labels = append(d.Labels, lp.GetName())
			}
		}
		docs[d.Name] = d
	}
	// Every described collector must have shown up in the gather: a metric
	// added to metrics.New without a line in touch would otherwise be
	// missing from the docs.
	descs := make(chan *prometheus.Desc, 256)
	go func() { m.Registry.Describe(descs); close(descs) }()
	for d := range descs {
		name := descName(d)
		if name == "" || isStandard(name) {
			continue
		}
		if _, ok := docs[name]; !ok {
			return "", fmt.Errorf("metric %s is registered but docgen's touch does not record a value for it: add it there", name)
		}
	}
	return renderMetrics(docs), nil
}

// touch records one value in every metric of metrics.New, through the
// same methods the router calls, so that labelled families appear in a
// gather.
func touch(m *metrics.Router) {
	m.DecisionPhase("x", time.Millisecond)
	m.Decision("routed", 1, 1)
	m.DecisionDegraded("x")
	m.Disaggregation("x")
	m.EventApplied("x")
	m.EventDropped("x")
	m.ShardRestarted(0, true)
	m.WorkerRejected("x")
	m.ConnRefused("x", "x")
	m.StrideMismatch()
	m.BacklogDropped("x")
	m.QueueDepth(1)
	m.SharedCache(1, 1, 1)
	m.SessionEvent("x", 1)
	m.SessionMoved("x")
	m.SessionCount(1)
	m.AdmissionRefused("x")
	m.RequestsExpired("x", 1)
	m.HTTPRequests.WithLabelValues("x", "200").Inc()
	m.GRPCRequests.WithLabelValues("x", "OK").Inc()
	m.ProxyRequests.WithLabelValues("x").Inc()
	m.Migrations.WithLabelValues("x", "y").Inc()
	m.ProxyTTFT.Observe(1)
	m.PromptsRefused.WithLabelValues("x").Inc()
	m.BodiesRefused.WithLabelValues("x", "x").Inc()
	m.EPPRequests.WithLabelValues("x").Inc()
	m.EPPAnswers.WithLabelValues("x").Inc()
	m.Tokenize.RegisterInFlight(func() int { return 0 })
	m.Links.Reconnect("x", "x")
	m.Links.RegisterBackoff("x", func() time.Duration { return 0 })
	p := m.Parity
	p.Compared.WithLabelValues("x").Inc()
	p.TokenMismatch.WithLabelValues("x").Inc()
	p.PredictedCached.WithLabelValues("x", "0", "0").Inc()
	p.ConfirmedCached.WithLabelValues("x", "0", "0").Inc()
	p.UnconfirmedCached.WithLabelValues("x", "0", "0").Inc()
	p.WithoutUsage.WithLabelValues("x", "x").Inc()
	p.Switches.WithLabelValues("x", "x").Inc()
	p.Checks.WithLabelValues("x", "x").Inc()
}

var fqName = regexp.MustCompile(`fqName: "([^"]*)"`)

// descName is a Desc's metric name (client_golang exports it only in
// the Desc's String form).
func descName(d *prometheus.Desc) string {
	if m := fqName.FindStringSubmatch(d.String()); m != nil {
		return m[1]
	}
	return ""
}

func isStandard(name string) bool {
	for _, p := range standardPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func renderMetrics(docs map[string]metricDoc) string {
	var b strings.Builder
	b.WriteString("<!-- Generated by `make docs` (go run ./cmd/gendocs metrics) from the registered collectors; do not edit. -->\n")
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Every metric a replica exports on `GET /metrics` (HTTP and admin ports, no token).\n")
	b.WriteString("Some appear only once the part that reports them runs: NATS ingestion (`kv_event_*`,\n")
	b.WriteString("`heartbeats_*`), ZMQ ingestion (`zmq_*`), the cluster (`gossip_*`, `cluster_*`,\n")
	b.WriteString("`registry_*`), discovery and engine polling (`discovery_*`, `engine_*`), the proxy's\n")
	b.WriteString("parity tracking (`parity_*`). Counters named `kvrouter_<name>_total{source}` are\n")
	b.WriteString("the components' own totals; `source` names the component or, for the\n")
	b.WriteString("`*_malformed`, `*_errors` and `index_trust_to_*` counters, the reason.\n")
	b.WriteString("Besides these, client_golang's standard Go runtime (`go_*`) and process\n")
	b.WriteString("(`process_*`) collectors are registered.\n\n")
	b.WriteString("| name | type | labels | help |\n|---|---|---|---|\n")
	for _, name := range sortedKeys(docs) {
		d := docs[name]
		labels := ""
		if len(d.Labels) > 0 {
			sort.Strings(d.Labels)
			labels = "`" + strings.Join(d.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Name, d.Type, labels, escapeCell(d.Help))
	}
	return b.String()
}

func escapeCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
