package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerfile is deploy/Dockerfile read as the build sees it: the build
// stage's ENV settings, its RUN lines, and each stage's name and ENV.
type dockerfile struct {
	buildEnv map[string]string
	runs     []string
	stages   map[string]map[string]string // target → ENV
	entry    map[string]string            // target → ENTRYPOINT
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	raw := mustRead(t, "Dockerfile")
	// Join continuation lines, drop comments.
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	df := dockerfile{buildEnv: map[string]string{}, stages: map[string]map[string]string{}, entry: map[string]string{}}
	stage := ""
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			f := strings.Fields(rest)
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				t.Fatalf("unnamed stage %q: every stage is a target", l)
			}
			stage = f[2]
			df.stages[stage] = map[string]string{}
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("ENV %q: use KEY=value", kv)
				}
				df.stages[stage][k] = v
				if stage == "build" {
					df.buildEnv[k] = v
				}
			}
		case "RUN":
			if stage != "build" {
				t.Fatalf("RUN in stage %s: the runtime images are distroless", stage)
			}
			df.runs = append(df.runs, rest)
		case "ENTRYPOINT":
			df.entry[stage] = rest
		}
	}
	return df
}

// shellWords splits a RUN line the way /bin/sh does for the plain words
// and double-quoted strings the Dockerfile uses.
func shellWords(t *testing.T, s string) []string {
	var out []string
	var w strings.Builder
	inQuote, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, inWord = !inQuote, true
		case r == ' ' && !inQuote:
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune("$`'\\&|;<>", r):
			t.Fatalf("RUN %q: shell syntax the test does not interpret", s)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// The images' contract: two targets, stripped and path-free binaries, a
// build that needs no network, listeners a published port reaches.
func TestDockerfile(t *testing.T) {
	df := readDockerfile(t)
	for k, want := range map[string]string{"GOPROXY": "off", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"} {
		if df.buildEnv[k] != want {
			t.Errorf("build stage %s=%q, want %q", k, df.buildEnv[k], want)
		}
	}
	if df.stages["kvrouter"]["KVROUTER_HTTP_ADDR"] != "0.0.0.0:8080" || df.entry["kvrouter"] != `["/usr/local/bin/kvrouter"]` {
		t.Errorf("kvrouter target: env %v, entrypoint %s", df.stages["kvrouter"], df.entry["kvrouter"])
	}
	if df.stages["mockworker"]["MOCKWORKER_HTTP_ADDR"] != "0.0.0.0:8000" || df.entry["mockworker"] != `["/usr/local/bin/mockworker"]` {
		t.Errorf("mockworker target: env %v, entrypoint %s", df.stages["mockworker"], df.entry["mockworker"])
	}
	built := map[string]bool{}
	for _, run := range df.runs {
		if !strings.Contains(run, "-trimpath") || !strings.Contains(run, `-ldflags "-s -w"`) {
			t.Errorf("RUN %s: want -trimpath -ldflags \"-s -w\"", run)
		}
		built[filepath.Base(run[strings.LastIndex(run, " ")+1:])] = true
	}
	if !built["kvrouter"] || !built["mockworker"] {
		t.Errorf("the build stage builds %v, want kvrouter and mockworker", built)
	}

	// The context: no repository history, caches or outputs, but the
	// module cache the build reads.
	ignore := map[string]bool{}
	for _, l := range strings.Split(mustRead(t, "../.dockerignore"), "\n") {
		ignore[strings.TrimSpace(l)] = true
	}
	for _, p := range []string{".git", ".cache/*", "!.cache/gomod", "out/", "data/", "bin/", "*.test"} {
		if !ignore[p] {
			t.Errorf(".dockerignore lacks %s", p)
		}
	}
}

// The build stage's commands, run here as the Dockerfile runs them
// (its ENV, GOPROXY=off) against a filled module cache: the repository's
// .cache/gomod when it exists (the image's context), else this machine's.
// Nothing is fetched, so this fails if the build would need the network.
// It compiles both binaries with -trimpath (minutes on a cold build
// cache), so it runs with KVROUTER_IMAGE_CHECK=1: `make image-check`.
func TestDockerfileBuildOffline(t *testing.T) {
	if os.Getenv("KVROUTER_IMAGE_CHECK") != "1" {
		t.Skip("set KVROUTER_IMAGE_CHECK=1 (make image-check): builds both binaries")
	}
	df := readDockerfile(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	modcache := filepath.Join(root, ".cache", "gomod")
	if _, err := os.Stat(modcache); err != nil {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			t.Fatal(err)
		}
		modcache = strings.TrimSpace(string(out))
	}
	out := t.TempDir()
	env := os.Environ()
	for k, v := range df.buildEnv {
		if k == "GOMODCACHE" {
			v = modcache
		}
		env = append(env, k+"="+v)
	}
	for _, run := range df.runs {
		args := shellWords(t, run)
		for i, a := range args {
			if strings.HasPrefix(a, "/out/") {
				args[i] = filepath.Join(out, strings.TrimPrefix(a, "/out/"))
			}
		}
		if args[0] != "go" {
			t.Fatalf("RUN %s: only go commands are checked", run)
		}
		cmd := exec.Command("go", args[1:]...)
		cmd.Dir, cmd.Env = root, env
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s with GOPROXY=off: %v\n%s", run, err, b)
		}
	}
	for _, bin := range []string{"kvrouter", "mockworker"} {
		fi, err := os.Stat(filepath.Join(out, bin))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes", bin, fi.Size())
	}
}
