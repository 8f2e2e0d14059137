package discovery

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func rec(key string, ready bool) Record {
	r := DefaultDefaults().record(key, key, "10.0.0."+key, 8000)
	r.Ready = ready
	return r
}

func ids(recs []Record) []kv.WorkerID {
	var out []kv.WorkerID
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func TestReconciler(t *testing.T) {
	a, b, c := rec("1", true), rec("2", true), rec("3", true)
	bNotReady := rec("2", false)
	aMoved := a
	aMoved.URL = "http://10.0.0.9:8000"
	type step struct {
		name string
		u    Update
		want Plan
	}
	steps := []step{
		{"first view", Update{Source: "dns", Records: []Record{a, b}}, Plan{Register: []Record{a, b}}},
		{"same view: nothing", Update{Source: "dns", Records: []Record{b, a}}, Plan{}},
		{"not ready", Update{Source: "dns", Records: []Record{a, bNotReady}}, Plan{NotReady: []kv.WorkerID{b.ID}}},
		{"ready again", Update{Source: "dns", Records: []Record{a, b}}, Plan{Ready: []kv.WorkerID{b.ID}}},
		{"a failed look keeps the view", Update{Source: "dns", Err: errors.New("server down")}, Plan{}},
		{"gone: drained", Update{Source: "dns", Records: []Record{a}}, Plan{Drain: []kv.WorkerID{b.ID}}},
		{"back: registered again", Update{Source: "dns", Records: []Record{a, b}}, Plan{Register: []Record{b}}},
		{"a second source adds one and repeats one", Update{Source: "k8s", Records: []Record{b, c}}, Plan{Register: []Record{c}}},
		{"gone from one source, seen by the other", Update{Source: "dns", Records: []Record{a}}, Plan{}},
		{"changed address: registered again", Update{Source: "dns", Records: []Record{aMoved}}, Plan{Register: []Record{aMoved}}},
		{"empty view drains the source's own", Update{Source: "k8s", Records: nil}, Plan{Drain: sorted(b.ID, c.ID)}},
	}
	r := NewReconciler()
	for _, st := range steps {
		got := r.Apply(st.u)
		if !reflect.DeepEqual(ids(got.Register), ids(st.want.Register)) || !reflect.DeepEqual(got.Drain, st.want.Drain) ||
			!reflect.DeepEqual(got.Ready, st.want.Ready) || !reflect.DeepEqual(got.NotReady, st.want.NotReady) {
			t.Fatalf("%s: plan %+v, want %+v", st.name, got, st.want)
		}
		if got.Empty() != st.want.Empty() {
			t.Fatalf("%s: Empty() = %v", st.name, got.Empty())
		}
	}
	if got := ids(r.Records()); !reflect.DeepEqual(got, []kv.WorkerID{a.ID}) {
		t.Fatalf("records %v", got)
	}
	if p := r.Remove("dns"); !reflect.DeepEqual(p.Drain, []kv.WorkerID{a.ID}) || r.Has(a.ID) {
		t.Fatalf("remove source: %+v", p)
	}
}

// Ids come from the engine's identity alone: two replicas (two
// reconcilers) fed the same views in another order agree.
func TestReconcilersAgree(t *testing.T) {
	views := []Update{
		{Source: "dns", Records: []Record{rec("1", true), rec("2", true)}},
		{Source: "k8s", Records: []Record{rec("2", true), rec("3", false)}},
	}
	r1, r2 := NewReconciler(), NewReconciler()
	r1.Apply(views[0])
	r1.Apply(views[1])
	r2.Apply(views[1])
	r2.Apply(views[0])
	if !reflect.DeepEqual(r1.Records(), r2.Records()) {
		t.Fatalf("replicas disagree:\n%v\n%v", r1.Records(), r2.Records())
	}
	if WorkerID("k8s-pod/abc") != WorkerID("k8s-pod/abc") || WorkerID("k8s-pod/abc") == WorkerID("k8s-pod/abd") {
		t.Fatal("WorkerID not a function of the key")
	}
	for _, key := range []string{"", "x", "dns/10.0.0.1:8000"} {
		if id := WorkerID(key); id == 0 || id>>63 != 0 {
			t.Fatalf("WorkerID(%q) = %d: want 0 < id < 2^63", key, id)
		}
	}
}

func TestParse(t *testing.T) {
	good := map[string]string{
		"dns://vllm.ns.svc.cluster.local:8000":                                        "dns",
		"dns://vllm?kv-events-port=0&replay-port=0&dp-size=2&model=m":                 "dns",
		"dns+srv://_http._tcp.vllm.ns.svc?server=127.0.0.1:53":                        "dns",
		"k8s://default?selector=app%3Dvllm":                                           "k8s",
		"k8s://default?selector=app%20in%20(vllm,sglang)&port=http":                   "k8s",
		"k8s-inferencepool://default/pool":                                            "pool",
		"k8s-inferencepool://default/pool?api=inference.networking.x-k8s.io/v1alpha2": "pool",
	}
	for uri := range good {
		_, err := Parse(uri, Options{Interval: 1})
		if kubeScheme(uri) && !kubeBuilt {
			if !errors.Is(err, errNoKube) {
				t.Errorf("%s in a nokube build: err %v, want errNoKube", uri, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", uri, err)
		}
	}
	bad := map[string]string{
		"consul://x":                         "unknown scheme",
		"dns://":                             "no name",
		"dns://x:99999":                      "bad port",
		"dns+srv://x:80":                     "SRV records carry the ports",
		"dns://x?server=nope":                "want host:port",
		"dns://x?kv-events-port=70000":       "want a port number",
		"dns://x?dp-size=0":                  "want an integer",
		"dns://x?interval=-1s":               "positive duration",
		"dns://x?colour=blue":                "unknown option",
		"k8s://default":                      "label selector is required",
		"k8s://default?selector=a%3D%3D%3Db": "selector",
		"k8s://?selector=a%3Db":              "want k8s://NAMESPACE",
		"k8s-inferencepool://default":        "want k8s-inferencepool://NAMESPACE/NAME",
		"k8s-inferencepool://ns/a/b":         "want k8s-inferencepool://NAMESPACE/NAME",
		"k8s-inferencepool://ns/p?api=v1":    "want GROUP/VERSION",
	}
	for uri, want := range bad {
		if kubeScheme(uri) && !kubeBuilt {
			want = errNoKube.Error() // a nokube build refuses the scheme before reading it
		}
		if _, err := Parse(uri, Options{Interval: 1}); err == nil || !contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", uri, err, want)
		}
	}
	s, err := Parse("dns://vllm:9000?kv-events-port=6000&replay-port=0&dp-size=2&block-size=32&model=llama", Options{Interval: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := s.(*dnsSource).defaults.record("dns/10.1.2.3:9000", "x", "10.1.2.3", 9000)
	want := Record{Key: "dns/10.1.2.3:9000", ID: WorkerID("dns/10.1.2.3:9000"), Name: "x", URL: "http://10.1.2.3:9000",
		DPSize: 2, BlockSize: 32, KVEventsEndpoint: "tcp://10.1.2.3:6000", Models: []string{"llama"}, Ready: true}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("record %+v, want %+v", r, want)
	}
	v6 := DefaultDefaults().record("k", "k", "fd00::1", 8000)
	if v6.URL != "http://[fd00::1]:8000" || v6.KVEventsEndpoint != "tcp://[fd00::1]:5557" || v6.ReplayEndpoint != "tcp://[fd00::1]:5558" {
		t.Fatalf("IPv6 record %+v", v6)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func sorted(ids ...kv.WorkerID) []kv.WorkerID {
	slices.Sort(ids)
	return ids
}

func kubeScheme(uri string) bool {
	return strings.HasPrefix(uri, "k8s://") || strings.HasPrefix(uri, "k8s-inferencepool://")
}
