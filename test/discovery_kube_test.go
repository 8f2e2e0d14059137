//go:build !nokube

// Kubernetes discovery through client-go's fake clientset: left out of a
// -tags nokube build (make test runs these without the race detector, so
// the race build need not compile client-go).

package test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/discovery"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// allowAllReviews answers the router's SelfSubjectAccessReviews as an API
// server that grants its RBAC (client-go's fake would deny them).
func allowAllReviews(c *fake.Clientset) {
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
}

// TestKubernetesDiscovery: a replica with k8s:// discovery over client-go's
// fake clientset (the real informers; NewKubeClients would connect the
// same code to a cluster). A Ready pod takes routes, a NotReady one stops
// at once, a deleted one drains.
func TestKubernetesDiscovery(t *testing.T) {
	fleet := newPlainFleet(t)
	fleet.start("127.0.0.2", mockengine.MetricsVLLM)
	client := fake.NewClientset()
	allowAllReviews(client)
	rep := StartReplica(t, func(c *config.Config) {
		c.Discover = []string{fmt.Sprintf("k8s://inference?selector=app%%3Dvllm&kv-events-port=%d&replay-port=%d", fleet.zmq, fleet.replay)}
		c.KubeClients = &discovery.KubeClients{Core: client}
		c.EnginePollInterval = 100 * time.Millisecond
	})
	base := BaseURL(rep)
	pods := client.CoreV1().Pods("inference")
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-0", Namespace: "inference", UID: "pod-uid-0", Labels: map[string]string{"app": "vllm"},
			Annotations: map[string]string{discovery.AnnotationPort: strconv.Itoa(fleet.httpPort), discovery.AnnotationModel: "llama"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.2",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	id := uint64(discovery.WorkerID("k8s-pod/pod-uid-0"))
	wantCode := func(want int) func() error {
		return func() error {
			if code, r := routeTo(t, base, id); code != want {
				return fmt.Errorf("route to the pod: %d %s, want %d", code, r.Error, want)
			}
			return nil
		}
	}
	testutil.EventuallyNil(t, 10*time.Second, wantCode(http.StatusOK))
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 10*time.Second, wantCode(http.StatusServiceUnavailable))
	if _, r := routeTo(t, base, id); !strings.Contains(r.Error, "unhealthy") {
		t.Fatalf("NotReady pod: %s", r.Error)
	}
	if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if _, r := routeTo(t, base, id); !strings.Contains(r.Error, "draining") {
			return fmt.Errorf("deleted pod: %s", r.Error)
		}
		return nil
	})
}
