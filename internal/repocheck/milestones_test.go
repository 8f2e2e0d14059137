package repocheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The words are built from parts so that this file does not trip its
// own check.
const (
	stop  = "st" + "op"
	issue = "is" + "sue"
)

func TestScanMilestoneWords(t *testing.T) {
	for _, tc := range []struct {
		path, text string
		want       int
	}{
		{"README.md", "measured at " + stop + " 24 on the box", 1},
		{"README.md", "(" + strings.ToUpper(stop[:1]) + stop[1:] + " #31)", 1},
		{"CHANGELOG.md", "released after " + stop + " 3", 1},
		{"a.go", "// the bound of " + issue + " 17", 1},
		{"a.go", "// see " + strings.ToUpper(issue) + " #30 and " + issue + "s 12", 2},
		{"docs/x.md", "fixed in " + issue + "-9", 0},
		{"CHANGELOG.md", "closes " + issue + " 17", 0},
		{"a.go", "// golang/go " + issue + " 75804", 0},
		{"a.go", "// GitHub " + issue + " 244", 0},
		{"a.go", "// upstream " + issue + " #12", 0},
		{"Makefile", "# golang/go#75804, vllm-project/router #244", 0},
		{"a.go", "// " + stop + "s 4 bytes short", 0},
		{"a.md", "still gets the " + stop + " (2)", 0},
		{"a.md", "a non" + stop + " 5 minute run", 0},
		{"a.md", issue + "d 4 tokens", 0},
		{"a.md", "the " + issue + " is 17 ms", 0},
	} {
		got := ScanMilestoneWords(tc.path, tc.text)
		if len(got) != tc.want {
			t.Errorf("%s %q: %d findings %v, want %d", tc.path, tc.text, len(got), got, tc.want)
		}
	}
}

// TestNoMilestoneWords fails on internal milestone words in any file git
// tracks: the history of the work belongs in git log.
func TestNoMilestoneWords(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := trackedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no files to check")
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		for _, x := range ScanMilestoneWords(f, string(b)) {
			t.Errorf("%s:%d: internal milestone word %q: say what the code does; history belongs in git log or CHANGELOG.md", x.Path, x.Line, x.Text)
		}
	}
}

// trackedFiles lists git's tracked files, or every file under root
// (without .git, .cache, out and data) outside a git checkout.
func trackedFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		return files, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch rel {
			case ".git", ".cache", "out", "data", ".bin":
				return filepath.SkipDir
			}
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, err
}
