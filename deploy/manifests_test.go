// Package deploy holds no code: its test checks the Kubernetes manifests
// (deploy/k8s) against the API types and against each other.
package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/discovery"
)

// objects decodes every document of every manifest strictly (unknown
// fields are errors); kinds outside client-go's scheme come back
// unstructured.
func objects(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = decodeStrict(t, f, raw)
	}
	return out
}

// decodeStrict decodes every document of a multi-document manifest
// strictly; kinds outside client-go's scheme come back unstructured.
func decodeStrict(t *testing.T, f string, raw []byte) []runtime.Object {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var out []runtime.Object
	{
		for i, doc := range bytes.Split(raw, []byte("\n---")) {
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := strict.Decode(doc, nil, nil)
			if runtime.IsNotRegisteredError(err) {
				u := &unstructured.Unstructured{}
				if err := yaml.Unmarshal(doc, &u.Object); err != nil {
					t.Fatalf("%s document %d: %v", f, i, err)
				}
				obj = u
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// The router discovers the engine manifests' pods, with the RBAC it
// needs, and the engines speak what the router expects.
func TestManifests(t *testing.T) {
	objs := objects(t)
	var router *appsv1.Deployment
	for _, o := range objs["router.yaml"] {
		if d, ok := o.(*appsv1.Deployment); ok {
			router = d
		}
	}
	if router == nil {
		t.Fatal("router.yaml has no Deployment")
	}
	pod := router.Spec.Template.Spec
	c := pod.Containers[0]
	uri := strings.ReplaceAll(env(c, "KVROUTER_DISCOVER"), "$(POD_NAMESPACE)", "inference")
	if _, err := discovery.Parse(uri, discovery.Options{Interval: 1}); err != nil {
		t.Fatalf("router's KVROUTER_DISCOVER: %v", err)
	}
	sel, err := labels.Parse(strings.ReplaceAll(strings.ReplaceAll(strings.SplitN(uri, "selector=", 2)[1], "%2F", "/"), "%3D", "="))
	if err != nil {
		t.Fatal(err)
	}
	blockSize := env(c, "KVROUTER_BLOCK_SIZE")
	if blockSize == "" {
		blockSize = strconv.Itoa(config.Default().BlockSize)
	}

	// A rolling update's stop: the preStop wait (the Service stops
	// sending connections) and the drain of requests in flight fit in
	// the grace period, so the replica leaves the cluster before the
	// kubelet kills it.
	drain := config.Default().ShutdownTimeout
	if v := env(c, "KVROUTER_SHUTDOWN_TIMEOUT"); v != "" {
		if drain, err = time.ParseDuration(v); err != nil {
			t.Fatalf("KVROUTER_SHUTDOWN_TIMEOUT: %v", err)
		}
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("the router has no preStop wait: the Service may send connections to a replica whose listener is closed")
	}
	stop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + drain
	if grace := pod.TerminationGracePeriodSeconds; grace == nil || stop >= time.Duration(*grace)*time.Second {
		t.Fatalf("preStop wait + shutdown timeout = %v, not within terminationGracePeriodSeconds %v", stop, grace)
	}

	// RBAC: the router's service account may get, list and watch pods and
	// InferencePools.
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, o := range objs["rbac.yaml"] {
		switch o := o.(type) {
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			binding = o
		}
	}
	if role == nil || binding == nil || binding.RoleRef.Name != role.Name || binding.Subjects[0].Name != pod.ServiceAccountName {
		t.Fatalf("rbac.yaml does not bind a Role to the router's service account %q", pod.ServiceAccountName)
	}
	for _, res := range []string{"pods", "inferencepools"} {
		verbs := map[string]bool{}
		for _, r := range role.Rules {
			for _, rr := range r.Resources {
				if rr == res {
					for _, v := range r.Verbs {
						verbs[v] = true
					}
				}
			}
		}
		if !verbs["get"] || !verbs["list"] || !verbs["watch"] {
			t.Errorf("the Role lacks get/list/watch on %s: %v", res, verbs)
		}
	}
	if !strings.Contains(mustRead(t, "k8s/kustomization.yaml"), "rbac.yaml") {
		t.Error("kustomization.yaml does not apply rbac.yaml")
	}

	// Engines: selected by the router, block size equal to the router's,
	// KV events published where the router subscribes.
	for _, file := range []string{"vllm.yaml", "sglang.yaml"} {
		var d *appsv1.Deployment
		for _, o := range objs[file] {
			if dd, ok := o.(*appsv1.Deployment); ok {
				d = dd
			}
		}
		if d == nil {
			t.Fatalf("%s has no Deployment", file)
		}
		tmpl := d.Spec.Template
		if !sel.Matches(labels.Set(tmpl.Labels)) {
			t.Errorf("%s: pods labelled %v are not selected by the router (%s)", file, tmpl.Labels, sel)
		}
		args := strings.Join(tmpl.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, "-size="+blockSize) {
			t.Errorf("%s: block/page size is not the router's %s: %s", file, blockSize, args)
		}
		if ann := tmpl.Annotations[discovery.AnnotationBlockSize]; ann != "" && ann != blockSize {
			t.Errorf("%s: kvrouter.io/block-size %s, router %s", file, ann, blockSize)
		}
		var kvcfg map[string]any
		for _, a := range tmpl.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--kv-events-config="); ok {
				if err := jsonUnmarshal(v, &kvcfg); err != nil {
					t.Fatalf("%s: --kv-events-config is not JSON: %v", file, err)
				}
			}
		}
		d0 := discovery.DefaultDefaults()
		if kvcfg["publisher"] != "zmq" || kvcfg["endpoint"] != "tcp://*:"+strconv.Itoa(d0.KVEventsPort) ||
			kvcfg["replay_endpoint"] != "tcp://*:"+strconv.Itoa(d0.ReplayPort) {
			t.Errorf("%s: --kv-events-config %v does not publish on the ports the router reads (%d, %d)", file, kvcfg, d0.KVEventsPort, d0.ReplayPort)
		}
	}

	// The InferencePool example reads as the router reads pools.
	var pool *unstructured.Unstructured
	for _, o := range objs["inferencepool.yaml"] {
		pool, _ = o.(*unstructured.Unstructured)
	}
	if pool == nil || pool.GetKind() != "InferencePool" || pool.GetAPIVersion() != discovery.DefaultPoolAPI {
		t.Fatalf("inferencepool.yaml: %v", pool)
	}
	matchLabels, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	if matchLabels["app"] != "vllm" {
		t.Errorf("the pool does not select vllm.yaml's pods: %v", matchLabels)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
