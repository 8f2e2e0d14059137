//go:build !nokube

package discovery

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kvrouter/kvrouter/kv"
)

// These tests drive the real informer code over client-go's fake
// clientset (and the dynamic fake for InferencePools): the same source
// runs against a real API server with NewKubeClients.

func pod(name, ip string, ready bool, lbls map[string]string, ann map[string]string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "inference", UID: types.UID("uid-" + name), Labels: lbls, Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8000}, {Name: "metrics", ContainerPort: 9090}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

var vllmLabels = map[string]string{"app": "vllm"}

// allowAll answers the router's SelfSubjectAccessReviews (the fake
// clientset would deny them all); deny lists verbs to refuse.
func allowAll(c *fake.Clientset, deny ...string) {
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview)
		out := r.DeepCopy()
		out.Status.Allowed = true
		for _, verb := range deny {
			if r.Spec.ResourceAttributes.Verb == verb {
				out.Status.Allowed = false
			}
		}
		return true, out, nil
	})
}

// watchSource runs a source and returns its updates.
func watchSource(t *testing.T, uri string, kube *KubeClients) <-chan Update {
	t.Helper()
	s, err := Parse(uri, Options{Interval: 50 * time.Millisecond, Kube: kube})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan Update, 1000)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, func(u Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); <-done })
	return updates
}

type view map[string]bool // pod name → ready

func viewOf(recs []Record) view {
	v := view{}
	for _, r := range recs {
		v[strings.TrimPrefix(r.Name, "inference/")] = r.Ready
	}
	return v
}

// await waits for an update satisfying ok (5 s).
func await(t *testing.T, updates <-chan Update, what string, ok func(Update) bool) Update {
	t.Helper()
	deadline := time.After(5 * time.Second)
	var last Update
	for {
		select {
		case u := <-updates:
			last = u
			if ok(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("%s: not within 5s; last update %+v", what, last)
		}
	}
}

func awaitView(t *testing.T, updates <-chan Update, want view) []Record {
	t.Helper()
	u := await(t, updates, fmt.Sprint("view ", want), func(u Update) bool {
		return u.Err == nil && reflect.DeepEqual(viewOf(u.Records), want)
	})
	return u.Records
}

func TestPodSource(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		pod("vllm-0", "10.1.0.1", true, vllmLabels, nil),
		pod("vllm-1", "10.1.0.2", false, vllmLabels, nil), // starting: registered, not ready
		pod("vllm-2", "", false, vllmLabels, nil),         // no IP yet: not an engine
		pod("other", "10.1.0.9", true, map[string]string{"app": "web"}, nil),
	)
	allowAll(client)
	pods := client.CoreV1().Pods("inference")
	updates := watchSource(t, "k8s://inference?selector=app%3Dvllm&model=llama", &KubeClients{Core: client})

	recs := awaitView(t, updates, view{"vllm-0": true, "vllm-1": false})
	r := recs[0]
	if r.Role != kv.RoleBoth {
		t.Fatalf("unannotated pod role %v", r.Role)
	}
	if r.Key != "k8s-pod/uid-vllm-0" || r.ID != WorkerID("k8s-pod/uid-vllm-0") || r.URL != "http://10.1.0.1:8000" ||
		r.KVEventsEndpoint != "tcp://10.1.0.1:5557" || r.ReplayEndpoint != "tcp://10.1.0.1:5558" || r.DPSize != 1 ||
		!reflect.DeepEqual(r.Models, []string{"llama"}) {
		t.Fatalf("record %+v", r)
	}

	// vllm-1 turns Ready; vllm-0 goes NotReady; a new pod with annotations.
	p1, _ := pods.Get(ctx, "vllm-1", metav1.GetOptions{})
	p1.Status.Conditions[0].Status = corev1.ConditionTrue
	mustUpdate(t, pods, p1)
	p0, _ := pods.Get(ctx, "vllm-0", metav1.GetOptions{})
	p0.Status.Conditions[0].Status = corev1.ConditionFalse
	mustUpdate(t, pods, p0)
	p3 := pod("vllm-3", "10.1.0.4", true, vllmLabels, map[string]string{
		AnnotationKVEventsPort: "6000", AnnotationReplayPort: "0", AnnotationDPSize: "4", AnnotationBlockSize: "32",
		AnnotationModel: "qwen", AnnotationPort: "metrics", AnnotationRole: "decode"})
	if _, err := pods.Create(ctx, p3, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs = awaitView(t, updates, view{"vllm-0": false, "vllm-1": true, "vllm-3": true})
	for _, r := range recs {
		if r.Name == "inference/vllm-3" && (r.URL != "http://10.1.0.4:9090" || r.KVEventsEndpoint != "tcp://10.1.0.4:6000" ||
			r.ReplayEndpoint != "" || r.DPSize != 4 || r.BlockSize != 32 || !reflect.DeepEqual(r.Models, []string{"qwen"}) ||
			r.Role != kv.RoleDecode) {
			t.Fatalf("annotated pod %+v", r)
		}
	}

	// A terminating pod and a deleted one leave; relabelled ones too.
	p3, _ = pods.Get(ctx, "vllm-3", metav1.GetOptions{})
	now := metav1.Now()
	p3.DeletionTimestamp = &now
	mustUpdate(t, pods, p3)
	if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitView(t, updates, view{"vllm-1": true})
}

func mustUpdate(t *testing.T, pods interface {
	Update(context.Context, *corev1.Pod, metav1.UpdateOptions) (*corev1.Pod, error)
}, p *corev1.Pod) {
	t.Helper()
	if _, err := pods.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A bad annotation falls back to the source's default; the pod stays.
func TestPodSourceBadAnnotation(t *testing.T) {
	client := fake.NewClientset(pod("vllm-0", "10.1.0.1", true, vllmLabels, map[string]string{AnnotationDPSize: "many"}))
	allowAll(client)
	recs := awaitView(t, watchSource(t, "k8s://inference?selector=app%3Dvllm", &KubeClients{Core: client}), view{"vllm-0": true})
	if recs[0].DPSize != 1 {
		t.Fatalf("bad dp-size annotation gave %+v", recs[0])
	}
}

// Without permission the source says which verbs are missing, and keeps
// reporting the informers' refusals (counted by the Manager), never
// crashing; once access is granted, the fleet appears.
func TestPodSourceForbidden(t *testing.T) {
	client := fake.NewClientset(pod("vllm-0", "10.1.0.1", true, vllmLabels, nil))
	allowAll(client, "list", "watch")
	var forbidden atomic.Bool
	forbidden.Store(true)
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbidden.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
				errors.New(`User "system:serviceaccount:inference:kvrouter" cannot list resource "pods" in API group "" in the namespace "inference"`))
		}
		return false, nil, nil
	})
	updates := watchSource(t, "k8s://inference?selector=app%3Dvllm", &KubeClients{Core: client})
	u := await(t, updates, "access review", func(u Update) bool { return u.Err != nil })
	var re *ReasonError
	if !errors.As(u.Err, &re) || re.Reason != "forbidden" ||
		!strings.Contains(u.Err.Error(), `may not list, watch pods in namespace "inference"`) {
		t.Fatalf("access review error: %v", u.Err)
	}
	u = await(t, updates, "informer refusal", func(u Update) bool {
		return u.Err != nil && strings.Contains(u.Err.Error(), "cannot list resource")
	})
	if !errors.As(u.Err, &re) || re.Reason != "forbidden" || !strings.Contains(u.Err.Error(), "grant get, list and watch on pods") {
		t.Fatalf("informer error: %v", u.Err)
	}
	forbidden.Store(false) // the RoleBinding was applied: the informer's retry succeeds
	awaitView(t, updates, view{"vllm-0": true})
}

var poolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

func inferencePool(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": poolGVR.GroupVersion().String(), "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": "inference"},
		"spec":     spec,
	}}
}

func dynamicClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	alpha := schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferencepools"}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{poolGVR: "InferencePoolList", alpha: "InferencePoolList"}, objs...)
}

func TestInferencePoolSource(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		pod("vllm-0", "10.1.0.1", true, vllmLabels, nil),
		pod("sglang-0", "10.1.0.5", true, map[string]string{"app": "sglang"}, nil),
	)
	allowAll(client)
	dyn := dynamicClient(inferencePool("chat", map[string]any{
		"selector":    map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
		"targetPorts": []any{map[string]any{"number": int64(8200)}},
	}), inferencePool("other", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "sglang"}}}))
	updates := watchSource(t, "k8s-inferencepool://inference/chat", &KubeClients{Core: client, Dynamic: dyn})
	recs := awaitView(t, updates, view{"vllm-0": true})
	if recs[0].URL != "http://10.1.0.1:8200" {
		t.Fatalf("pool target port not used: %+v", recs[0])
	}
	// The pool's selector changes: its engines follow.
	pools := dyn.Resource(poolGVR).Namespace("inference")
	p, err := pools.Get(ctx, "chat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(p.Object, map[string]any{"app": "sglang"}, "spec", "selector", "matchLabels"); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitView(t, updates, view{"sglang-0": true})
	// The pool is deleted: an error (counted), the last view stands.
	if err := pools.Delete(ctx, "chat", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u := await(t, updates, "pool gone", func(u Update) bool { return u.Err != nil })
	var re *ReasonError
	if !errors.As(u.Err, &re) || re.Reason != "pool_not_found" || !strings.Contains(u.Err.Error(), "InferencePool inference/chat") {
		t.Fatalf("deleted pool: %v", u.Err)
	}
}

func TestInferencePoolMissingAndAlpha(t *testing.T) {
	client := fake.NewClientset(pod("vllm-0", "10.1.0.1", true, vllmLabels, nil))
	allowAll(client)
	u := await(t, watchSource(t, "k8s-inferencepool://inference/nope", &KubeClients{Core: client, Dynamic: dynamicClient()}),
		"missing pool", func(u Update) bool { return u.Err != nil })
	if !strings.Contains(u.Err.Error(), "InferencePool inference/nope (inference.networking.k8s.io/v1) does not exist") {
		t.Fatalf("missing pool: %v", u.Err)
	}
	// A cluster without the InferencePool CRD.
	noCRD := dynamicClient()
	noCRD.PrependReactor("list", "inferencepools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(poolGVR.GroupResource(), "")
	})
	u = await(t, watchSource(t, "k8s-inferencepool://inference/chat", &KubeClients{Core: client, Dynamic: noCRD}),
		"no CRD", func(u Update) bool { return u.Err != nil })
	var re *ReasonError
	if !errors.As(u.Err, &re) || re.Reason != "api_unavailable" || !strings.Contains(u.Err.Error(), "install the Gateway API Inference Extension CRDs") {
		t.Fatalf("no CRD: %v", u.Err)
	}
	// The v1alpha2 shape: a flat selector and targetPortNumber.
	alpha := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferencePool",
		"metadata": map[string]any{"name": "old", "namespace": "inference"},
		"spec":     map[string]any{"selector": map[string]any{"app": "vllm"}, "targetPortNumber": int64(8100)},
	}}
	recs := awaitView(t, watchSource(t, "k8s-inferencepool://inference/old?api=inference.networking.x-k8s.io/v1alpha2",
		&KubeClients{Core: client, Dynamic: dynamicClient(alpha)}), view{"vllm-0": true})
	if recs[0].URL != "http://10.1.0.1:8100" {
		t.Fatalf("v1alpha2 pool: %+v", recs[0])
	}
}

// A kubeconfig that cannot be used is a counted error, retried, never a
// crash.
func TestPodSourceBadKubeconfig(t *testing.T) {
	s, err := Parse("k8s://inference?selector=app%3Dvllm", Options{Interval: 20 * time.Millisecond, Kubeconfig: "/nonexistent/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan Update, 10)
	go s.Run(ctx, func(u Update) {
		select {
		case updates <- u:
		default:
		}
	})
	u := await(t, updates, "kubeconfig error", func(u Update) bool { return u.Err != nil })
	var re *ReasonError
	if !errors.As(u.Err, &re) || re.Reason != "kube_error" || !strings.Contains(u.Err.Error(), "/nonexistent/kubeconfig") {
		t.Fatalf("bad kubeconfig: %v", u.Err)
	}
	await(t, updates, "retried", func(u Update) bool { return u.Err != nil })
}
