package config

import (
	"fmt"
	"reflect"
	"time"
)

// Group is a heading of `kvrouter serve -h` and docs/configuration.md.
// Every flag names its group in the group:"..." tag next to its flag:"..."
// tag, so a new flag cannot be left out of the help or the docs.
type Group struct {
	Name  string // the tag value
	Title string
	Intro string // one sentence for the reader of the docs
}

// Groups in the order help and docs list them.
var Groups = []Group{
	{"essentials", "Essentials", "What most deployments set: listeners, data directory, logging, the model, where workers and their KV events come from."},
	{"cluster", "Cluster", "Running several replicas that share load state by gossip (memberlist)."},
	{"security", "Security", "Tokens, allowed worker addresses, NATS authentication and TLS, gossip encryption (docs/security.md)."},
	{"gateway", "Gateway endpoint picker", "Serving as a Gateway API Inference Extension endpoint picker for an Envoy-based gateway (docs/gateway.md)."},
	{"routing", "Routing", "The cost a decision minimises and what counts as load (Dynamo's knob names and defaults)."},
	{"sessions", "Sticky sessions", "Requests of one session go to the same worker while it lives."},
	{"models", "Models and tokenization", "LoRA adapters, where prompts are tokenized and how chat requests are rendered."},
	{"parity", "Live cache parity", "Comparing engines' reported usage with the router's prediction (docs/parity.md)."},
	{"trust", "Index trust", "Rating each worker rank's KV-event index and what to do when it is not exact (docs/index-trust.md)."},
	{"events", "KV events and NATS", "Subjects, the JetStream stream and snapshots, heartbeats, ZMQ publishers."},
	{"discovery", "Discovery and engine health", "Finding engines by DNS or Kubernetes, and polling their /health and /metrics."},
	{"limits", "Limits", "Bounds on requests, connections and registry size that protect the router."},
	{"tuning", "Tuning", "Go runtime, shard and backlog sizes, timeouts; the defaults suit most fleets."},
}

// Flag describes one flag of Config.
type Flag struct {
	Name    string
	Group   string
	Type    string // duration, int, uint, float, string, list or bool
	Default string // as the flag prints it; empty for an empty string or list
	Env     string
	Help    string
	field   int
}

// Flags lists every flag of Config in declaration order, with the
// defaults of Default().
func Flags() []Flag {
	def := Default()
	v := reflect.ValueOf(&def).Elem()
	t := v.Type()
	var out []Flag
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("flag")
		if name == "" {
			continue
		}
		out = append(out, Flag{
			Name: name, Group: f.Tag.Get("group"), Type: typeName(f.Type), Env: EnvName(name), Help: f.Tag.Get("help"),
			Default: (&fieldValue{v: v.Field(i)}).String(), field: i,
		})
	}
	return out
}

// FlagsByGroup returns Flags grouped in the order of Groups; a flag whose
// group is not in Groups is an error (the test of this package keeps
// there being none).
func FlagsByGroup() (map[string][]Flag, error) {
	known := map[string]bool{}
	for _, g := range Groups {
		known[g.Name] = true
	}
	by := map[string][]Flag{}
	for _, f := range Flags() {
		if !known[f.Group] {
			return nil, fmt.Errorf("flag %s: group %q is not one of config.Groups", f.Name, f.Group)
		}
		by[f.Group] = append(by[f.Group], f)
	}
	return by, nil
}

func typeName(t reflect.Type) string {
	if t == reflect.TypeOf(time.Duration(0)) {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64:
		return "int"
	case reflect.Uint64:
		return "uint"
	case reflect.Float64:
		return "float"
	case reflect.Slice:
		return "list"
	}
	return "string"
}
