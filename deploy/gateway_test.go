package deploy

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/discovery"
)

// The gateway example (deploy/gateway) decodes strictly and agrees with
// itself: the pool's endpointPickerRef names the picker's Service and
// port, which lead to the routers' endpoint-picker port, and the routers
// discover the pool the gateway routes to.
func TestGatewayManifests(t *testing.T) {
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Path string `json:"path"`
		} `json:"patches"`
		SecretGenerator []struct {
			Name  string   `json:"name"`
			Type  string   `json:"type"`
			Files []string `json:"files"`
		} `json:"secretGenerator"`
		GeneratorOptions map[string]bool `json:"generatorOptions"`
	}
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, "gateway/kustomization.yaml")), &kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var svc *corev1.Service
	var pool *unstructured.Unstructured
	var patch *appsv1.Deployment
	routes := map[string]*unstructured.Unstructured{}
	files := append([]string{}, kust.Resources...)
	for _, p := range kust.Patches {
		files = append(files, p.Path)
	}
	for _, f := range files {
		if strings.HasPrefix(f, "../") {
			if !strings.HasSuffix(f, ".yaml") {
				f += "/kustomization.yaml"
			}
			mustRead(t, filepath.Join("gateway", f)) // the base exists
			continue
		}
		for _, o := range decodeStrict(t, f, []byte(mustRead(t, filepath.Join("gateway", f)))) {
			switch v := o.(type) {
			case *corev1.Service:
				svc = v
			case *appsv1.Deployment:
				patch = v
			case *unstructured.Unstructured:
				if v.GetKind() == "InferencePool" {
					pool = v
				}
				routes[v.GetKind()] = v
			}
		}
	}
	if svc == nil || pool == nil || patch == nil || routes["HTTPRoute"] == nil || routes["Gateway"] == nil {
		t.Fatalf("missing objects: service %v, pool %v, router patch %v, %v", svc != nil, pool != nil, patch != nil, routes)
	}
	if pool.GetAPIVersion() != discovery.DefaultPoolAPI {
		t.Errorf("pool API %s, want %s", pool.GetAPIVersion(), discovery.DefaultPoolAPI)
	}
	refName, _, _ := unstructured.NestedString(pool.Object, "spec", "endpointPickerRef", "name")
	rawPort, _, _ := unstructured.NestedFieldNoCopy(pool.Object, "spec", "endpointPickerRef", "port", "number")
	var refPort int64
	switch n := rawPort.(type) {
	case int64:
		refPort = n
	case float64:
		refPort = int64(n)
	}
	mode, _, _ := unstructured.NestedString(pool.Object, "spec", "endpointPickerRef", "failureMode")
	if refName != svc.Name || len(svc.Spec.Ports) != 1 || int64(svc.Spec.Ports[0].Port) != refPort {
		t.Errorf("endpointPickerRef %s:%d, picker Service %s %v", refName, refPort, svc.Name, svc.Spec.Ports)
	}
	if mode != "FailClose" && mode != "FailOpen" {
		t.Errorf("failureMode %q", mode)
	}
	c := patch.Spec.Template.Spec.Containers[0]
	addr := env(c, config.EnvName("epp-addr"))
	var port int32
	for _, p := range c.Ports {
		if p.Name == svc.Spec.Ports[0].TargetPort.StrVal {
			port = p.ContainerPort
		}
	}
	if port == 0 || !strings.HasSuffix(addr, ":"+strconv.Itoa(int(port))) {
		t.Errorf("picker listens on %q, the Service targets container port %d", addr, port)
	}
	if got, want := env(c, config.EnvName("discover")), "k8s-inferencepool://$(POD_NAMESPACE)/"+pool.GetName(); got != want {
		t.Errorf("routers discover %q, want the pool %q", got, want)
	}
	backend, _, _ := unstructured.NestedSlice(routes["HTTPRoute"].Object, "spec", "rules")
	if len(backend) == 0 || !strings.Contains(mustRead(t, "gateway/istio.yaml"), "name: "+pool.GetName()) {
		t.Errorf("the HTTPRoute does not lead to the pool %s", pool.GetName())
	}
	if len(kust.SecretGenerator) != 1 || kust.SecretGenerator[0].Type != "kubernetes.io/tls" {
		t.Errorf("the picker's TLS Secret: %+v", kust.SecretGenerator)
	}
}
