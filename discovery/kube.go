//go:build !nokube

package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvrouter/kvrouter/kv"
)

// KubeClients are the API clients of the Kubernetes sources.
type KubeClients struct {
	Core    kubernetes.Interface
	Dynamic dynamic.Interface
}

// NewKubeClients connects with a kubeconfig file, or ("" ) the in-cluster
// service account, then $KUBECONFIG and ~/.kube/config.
func NewKubeClients(kubeconfig string) (*KubeClients, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "kvrouter-discovery"
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	return &KubeClients{Core: core, Dynamic: dyn}, nil
}

// Pod annotations that override a source's defaults for one engine.
// kubeBuilt: this build has Kubernetes discovery (kube_off.go: without).
const kubeBuilt = true

const (
	AnnotationPrefix = "kvrouter.io/"
	// AnnotationKVEventsPort (default 5557, vLLM's), AnnotationReplayPort
	// (5558), AnnotationDPSize, AnnotationBlockSize, AnnotationModel.
	AnnotationKVEventsPort = AnnotationPrefix + "kv-events-port"
	AnnotationReplayPort   = AnnotationPrefix + "replay-port"
	AnnotationDPSize       = AnnotationPrefix + "dp-size"
	AnnotationBlockSize    = AnnotationPrefix + "block-size"
	AnnotationModel        = AnnotationPrefix + "model"
	// AnnotationRole is the engine's pool: prefill, decode or both
	// (default); without it LabelLLMDRole is read.
	AnnotationRole = AnnotationPrefix + "role"
	// LabelLLMDRole is llm-d's P/D role label.
	LabelLLMDRole = "llm-d.ai/role"
	// AnnotationPort is the engine's HTTP port (a number or a container
	// port name), over the source's port option.
	AnnotationPort = AnnotationPrefix + "port"
)

// DefaultPoolAPI is the InferencePool API version read by default (GA);
// api=inference.networking.x-k8s.io/v1alpha2 reads the alpha one.
const DefaultPoolAPI = "inference.networking.k8s.io/v1"

// podSource watches the pods of a namespace with informers: those
// matching a label selector (k8s://), or an InferencePool's selector
// (k8s-inferencepool://, the pool watched too).
type podSource struct {
	uri       string
	namespace string
	selector  labels.Selector // k8s://
	port      string          // k8s://: the port option (number or name)
	pool      string          // k8s-inferencepool://: the pool's name
	poolGVR   schema.GroupVersionResource
	defaults  Defaults
	opts      Options
	log       *slog.Logger
}

func newPodSource(uri string, u *url.URL, d Defaults, o Options) (*podSource, error) {
	ns := u.Host
	if ns == "" {
		return nil, fmt.Errorf("--discover %q: want k8s://NAMESPACE?selector=...", uri)
	}
	sel, err := labels.Parse(u.Query().Get("selector"))
	if err != nil {
		return nil, fmt.Errorf("--discover %q: selector: %w", uri, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("--discover %q: a label selector is required (selector=app%%3Dvllm)", uri)
	}
	return &podSource{uri: uri, namespace: ns, selector: sel, port: u.Query().Get("port"), defaults: d, opts: o,
		log: o.Logger.With("component", "discovery", "source", uri)}, nil
}

func newPoolSource(uri string, u *url.URL, d Defaults, o Options) (*podSource, error) {
	name := strings.Trim(u.Path, "/")
	if u.Host == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--discover %q: want k8s-inferencepool://NAMESPACE/NAME", uri)
	}
	api := u.Query().Get("api")
	if api == "" {
		api = DefaultPoolAPI
	}
	gv, err := schema.ParseGroupVersion(api)
	if err != nil || gv.Group == "" || gv.Version == "" {
		return nil, fmt.Errorf("--discover %q: api %q: want GROUP/VERSION", uri, api)
	}
	return &podSource{uri: uri, namespace: u.Host, pool: name, poolGVR: gv.WithResource("inferencepools"),
		port: u.Query().Get("port"), defaults: d, opts: o, log: o.Logger.With("component", "discovery", "source", uri)}, nil
}

func (s *podSource) Name() string { return s.uri }

// Run starts the informers and emits the engines on every change. The
// informers retry failed lists and watches themselves (with backoff);
// each failure is emitted as an error (counted, logged once a minute).
func (s *podSource) Run(ctx context.Context, emit func(Update)) {
	kube := s.opts.Kube
	for kube == nil {
		var err error
		if kube, err = NewKubeClients(s.opts.Kubeconfig); err != nil {
			emit(Update{Source: s.uri, Err: &ReasonError{Reason: "kube_error", Err: err}})
			select {
			case <-ctx.Done():
				return
			case <-time.After(max(s.opts.Interval, time.Second)):
			}
		}
	}
	if err := s.checkAccess(ctx, kube.Core); err != nil {
		emit(Update{Source: s.uri, Err: err})
	}
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { notify() }, UpdateFunc: func(any, any) { notify() }, DeleteFunc: func(any) { notify() },
	}
	watchErr := func(what string) cache.WatchErrorHandlerWithContext {
		return func(_ context.Context, _ *cache.Reflector, err error) {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return
			}
			emit(Update{Source: s.uri, Err: s.explain(what, err)})
		}
	}

	tweak := informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		if s.selector != nil {
			o.LabelSelector = s.selector.String()
		}
	})
	factory := informers.NewSharedInformerFactoryWithOptions(kube.Core, 0, informers.WithNamespace(s.namespace), tweak)
	pods := factory.Core().V1().Pods().Informer()
	_ = pods.SetWatchErrorHandlerWithContext(watchErr("pods"))
	if _, err := pods.AddEventHandler(handler); err != nil {
		emit(Update{Source: s.uri, Err: &ReasonError{Reason: "kube_error", Err: err}})
		return
	}
	synced := []cache.InformerSynced{pods.HasSynced}
	var poolInformer cache.SharedIndexInformer
	if s.pool != "" {
		dyn := dynamicinformer.NewFilteredDynamicSharedInformerFactory(kube.Dynamic, 0, s.namespace, func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.name=" + s.pool
		})
		poolInformer = dyn.ForResource(s.poolGVR).Informer()
		_ = poolInformer.SetWatchErrorHandlerWithContext(watchErr("inferencepools"))
		if _, err := poolInformer.AddEventHandler(handler); err != nil {
			emit(Update{Source: s.uri, Err: &ReasonError{Reason: "kube_error", Err: err}})
			return
		}
		synced = append(synced, poolInformer.HasSynced)
		dyn.Start(ctx.Done())
		defer dyn.Shutdown()
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return // stopped
	}
	for {
		recs, warnings, err := s.records(pods.GetStore(), poolInformer)
		emit(Update{Source: s.uri, Records: recs, Err: err, Warnings: warnings})
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// records builds the engines from the informers' caches.
func (s *podSource) records(pods cache.Store, pool cache.SharedIndexInformer) ([]Record, []error, error) {
	sel, port := s.selector, s.port
	if pool != nil {
		var obj *unstructured.Unstructured
		for _, o := range pool.GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetName() == s.pool && u.GetNamespace() == s.namespace {
				obj = u
			}
		}
		if obj == nil {
			return nil, nil, &ReasonError{Reason: "pool_not_found", Err: fmt.Errorf(
				"InferencePool %s/%s (%s) does not exist: no engines from it until it is created", s.namespace, s.pool, s.poolGVR.GroupVersion())}
		}
		var err error
		if sel, port, err = poolSelector(obj); err != nil {
			return nil, nil, &ReasonError{Reason: "bad_record", Err: fmt.Errorf("InferencePool %s/%s: %w", s.namespace, s.pool, err)}
		}
		if s.port != "" {
			port = s.port
		}
	}
	var out []Record
	var bad []error
	for _, o := range pods.List() {
		pod, ok := o.(*corev1.Pod)
		if !ok || !sel.Matches(labels.Set(pod.Labels)) {
			continue // a fake or older API server may not filter watches
		}
		rec, ok, err := s.podRecord(pod, port)
		if err != nil {
			bad = append(bad, err)
		}
		if ok {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	return out, bad, nil
}

// podRecord is a pod as an engine: skipped while it has no IP, once it is
// terminating or finished; present but not ready while it is not Ready.
func (s *podSource) podRecord(pod *corev1.Pod, port string) (Record, bool, error) {
	if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return Record{}, false, nil
	}
	ann := annotations(pod.Annotations)
	d, err := parseDefaults(ann, s.defaults)
	if err != nil {
		err = fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if v := ann.Get("port"); v != "" {
		port = v
	}
	n, perr := podPort(pod, port)
	if perr != nil {
		return Record{}, false, errors.Join(err, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, perr))
	}
	if ann.Get("role") == "" {
		// llm-d labels its P/D pods llm-d.ai/role=prefill|decode|both.
		if role, rerr := kv.ParseRole(pod.Labels[LabelLLMDRole]); rerr == nil && pod.Labels[LabelLLMDRole] != "" {
			d.Role = role
		}
	}
	rec := d.record("k8s-pod/"+string(pod.UID), pod.Namespace+"/"+pod.Name, pod.Status.PodIP, n)
	rec.Ready = podReady(pod)
	return rec, true, err
}

type annotations map[string]string

func (a annotations) Get(k string) string { return a[AnnotationPrefix+k] }

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPort resolves the engine's HTTP port: a number, a container port
// name, or (none given) the port named "http", else 8000.
func podPort(pod *corev1.Pod, port string) (int, error) {
	if n, err := strconv.Atoi(port); err == nil {
		if n <= 0 || n > 65535 {
			return 0, fmt.Errorf("port %d out of range", n)
		}
		return n, nil
	}
	name := port
	if name == "" {
		name = "http"
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return int(p.ContainerPort), nil
			}
		}
	}
	if port != "" {
		return 0, fmt.Errorf("no container port named %q", port)
	}
	return DefaultEnginePort, nil
}

// poolSelector reads an InferencePool's pod selector and target port:
// v1 (spec.selector.matchLabels, spec.targetPorts[0].number) or
// v1alpha2 (spec.selector, spec.targetPortNumber).
func poolSelector(obj *unstructured.Unstructured) (labels.Selector, string, error) {
	m, found, err := unstructured.NestedStringMap(obj.Object, "spec", "selector", "matchLabels")
	if !found || err != nil {
		m, found, err = unstructured.NestedStringMap(obj.Object, "spec", "selector")
	}
	if err != nil || !found || len(m) == 0 {
		return nil, "", fmt.Errorf("no pod selector (spec.selector.matchLabels or spec.selector)")
	}
	port := ""
	if ports, ok, _ := unstructured.NestedSlice(obj.Object, "spec", "targetPorts"); ok && len(ports) > 0 {
		if p, ok := ports[0].(map[string]any); ok {
			if n, ok, _ := unstructured.NestedInt64(p, "number"); ok {
				port = strconv.FormatInt(n, 10)
			}
		}
	}
	if port == "" {
		if n, ok, _ := unstructured.NestedInt64(obj.Object, "spec", "targetPortNumber"); ok {
			port = strconv.FormatInt(n, 10)
		}
	}
	return labels.SelectorFromSet(m), port, nil
}

// checkAccess asks the API server (SelfSubjectAccessReview) whether the
// router may get, list and watch what it needs, and names what is
// missing. An API server that cannot answer is not an error here: the
// informers will say.
func (s *podSource) checkAccess(ctx context.Context, core kubernetes.Interface) error {
	type res struct{ group, resource string }
	need := []res{{"", "pods"}}
	if s.pool != "" {
		need = append(need, res{s.poolGVR.Group, "inferencepools"})
	}
	var missing []string
	for _, r := range need {
		var verbs []string
		for _, verb := range []string{"get", "list", "watch"} {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			review, err := core.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{
				Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
					Namespace: s.namespace, Verb: verb, Group: r.group, Resource: r.resource,
				}},
			}, metav1.CreateOptions{})
			cancel()
			if err != nil {
				s.log.Debug("cannot review the router's own access", "err", err)
				return nil
			}
			if !review.Status.Allowed {
				verbs = append(verbs, verb)
			}
		}
		if len(verbs) > 0 {
			what := r.resource
			if r.group != "" {
				what += "." + r.group
			}
			missing = append(missing, fmt.Sprintf("%s %s", strings.Join(verbs, ", "), what))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &ReasonError{Reason: "forbidden", Err: fmt.Errorf(
		"kubernetes discovery: the router may not %s in namespace %q: grant get, list and watch on them (Role + RoleBinding, deploy/k8s/rbac.yaml)",
		strings.Join(missing, "; "), s.namespace)}
}

// explain turns an informer's list or watch error into a counted reason
// with advice.
func (s *podSource) explain(what string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return &ReasonError{Reason: "forbidden", Err: fmt.Errorf(
			"kubernetes discovery: %w; grant get, list and watch on %s in namespace %q (Role + RoleBinding, deploy/k8s/rbac.yaml)", err, what, s.namespace)}
	case apierrors.IsNotFound(err) && what == "inferencepools":
		return &ReasonError{Reason: "api_unavailable", Err: fmt.Errorf(
			"kubernetes discovery: the API server does not serve %s (%w): install the Gateway API Inference Extension CRDs, or name another version with api=",
			s.poolGVR.GroupVersion(), err)}
	case apierrors.IsUnauthorized(err):
		return &ReasonError{Reason: "unauthorized", Err: fmt.Errorf("kubernetes discovery: the API server refused the router's credentials: %w", err)}
	}
	return &ReasonError{Reason: "kube_error", Err: fmt.Errorf("kubernetes discovery: watching %s: %w", what, err)}
}
