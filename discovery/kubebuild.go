package discovery

import "errors"

// errNoKube is what a k8s scheme parses to in a build without Kubernetes
// discovery (-tags nokube, kube_off.go).
var errNoKube = errors.New("this binary is built without Kubernetes discovery (-tags nokube): use the kvrouter binary")
