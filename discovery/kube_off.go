//go:build nokube

package discovery

import (
	"fmt"
	"net/url"
)

// Built with -tags nokube (make demo's kvbench), the binary leaves out
// the Kubernetes sources and client-go, which are about 450 of its 1,090
// packages and most of its compile time; kvbench's fleets register
// their workers directly. The k8s schemes then fail to parse.

// KubeClients holds no clients in a binary without Kubernetes discovery.
type KubeClients struct{}

// kubeBuilt: this build has Kubernetes discovery.
const kubeBuilt = false

func newPodSource(uri string, _ *url.URL, _ Defaults, _ Options) (Source, error) {
	return nil, fmt.Errorf("--discover %q: %w", uri, errNoKube)
}

func newPoolSource(uri string, _ *url.URL, _ Defaults, _ Options) (Source, error) {
	return nil, fmt.Errorf("--discover %q: %w", uri, errNoKube)
}
