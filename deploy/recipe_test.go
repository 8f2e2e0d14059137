package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/cluster"
)

// kustomization is the part of kustomization.yaml the recipe relies on;
// yaml.UnmarshalStrict refuses any other key, so a new field is seen here.
type kustomization struct {
	APIVersion      string   `json:"apiVersion"`
	Kind            string   `json:"kind"`
	Resources       []string `json:"resources"`
	SecretGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
		Envs  []string `json:"envs"`
	} `json:"secretGenerator"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"generatorOptions"`
}

// The recipe of deploy/README.md, run as written on a copy of deploy/k8s:
// after its secret step, every file the kustomization names exists, and
// the Secrets carry the keys the manifests read. With a kustomize binary
// (KUSTOMIZE=path, e.g. from `make kustomize-check`) it also builds.
func TestKustomizeRecipe(t *testing.T) {
	readme := mustRead(t, "README.md")
	for _, step := range []string{"deploy/k8s/gen-secrets.sh", "kubectl apply -k deploy/k8s"} {
		if !strings.Contains(readme, step) {
			t.Fatalf("deploy/README.md no longer says %q", step)
		}
	}
	root := t.TempDir()
	dir := filepath.Join(root, "deploy", "k8s")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("k8s")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "cluster.key", "admin.token", "nats-auth.env": // a developer's own, never the test's input
			continue
		}
		b, err := os.ReadFile(filepath.Join("k8s", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "deploy/k8s/gen-secrets.sh")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen-secrets.sh: %v\n%s", err, out)
	}

	var k kustomization
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, "k8s/kustomization.yaml")), &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var names []string
	names = append(names, k.Resources...)
	secrets := map[string]string{}
	for _, g := range k.SecretGenerator {
		for _, f := range append(append([]string{}, g.Files...), g.Envs...) {
			names = append(names, f)
			secrets[g.Name] += mustRead(t, filepath.Join(dir, f))
		}
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("after the recipe's secret step, %s is missing: %v", n, err)
		}
	}
	if !regexp.MustCompile(`(?m)^router-password=[0-9a-f]{48}\nworker-password=[0-9a-f]{48}\n$`).MatchString(secrets["kvrouter-nats-auth"]) {
		t.Errorf("nats-auth.env lacks the keys nats.yaml and router.yaml read: %q", secrets["kvrouter-nats-auth"])
	}
	if keys, err := cluster.LoadKeyFile(filepath.Join(dir, "cluster.key")); err != nil || len(keys[0]) != 32 {
		t.Errorf("cluster.key is not a key the router loads (AES-256): %v", err)
	}
	if v := strings.TrimSpace(secrets["kvrouter-admin-token"]); len(v) < 16 || strings.Contains(v, "\n") {
		t.Errorf("admin.token %q: the router wants one token of at least 16 characters per line", v)
	}
	// Re-running keeps the keys (it never rotates by accident).
	before := mustRead(t, filepath.Join(dir, "cluster.key"))
	cmd = exec.Command("sh", "deploy/k8s/gen-secrets.sh")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil || mustRead(t, filepath.Join(dir, "cluster.key")) != before {
		t.Fatalf("a second run changed cluster.key: %v %s", err, out)
	}

	if bin := os.Getenv("KUSTOMIZE"); bin != "" {
		out, err := exec.Command(bin, "build", dir).Output()
		if err != nil {
			t.Fatalf("kustomize build: %v", err)
		}
		for _, want := range []string{"name: kvrouter-cluster-key", "name: kvrouter-admin-token", "name: kvrouter-nats-auth", "kind: Deployment"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("kustomize build output lacks %q", want)
			}
		}
	}
}

// Engine images are pinned, and vLLM's tag is the version the
// compatibility table was checked against.
func TestEngineImagesPinned(t *testing.T) {
	compat := mustRead(t, "../docs/compatibility.md")
	image := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`)
	for _, f := range []string{"k8s/vllm.yaml", "k8s/sglang.yaml"} {
		m := image.FindStringSubmatch(mustRead(t, f))
		if m == nil {
			t.Fatalf("%s: no image", f)
		}
		_, tag, ok := strings.Cut(m[1], ":")
		if !ok || tag == "latest" || !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(tag) {
			t.Errorf("%s: image %s is not pinned to a release", f, m[1])
		}
		if f == "k8s/vllm.yaml" && !strings.Contains(compat, tag) {
			t.Errorf("%s: vLLM %s is not a version docs/compatibility.md names", f, tag)
		}
	}
}
