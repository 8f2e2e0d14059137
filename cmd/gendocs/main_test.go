package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWritesTheConfigReference(t *testing.T) {
	p := filepath.Join(t.TempDir(), "configuration.md")
	if err := run([]string{"config", p}, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "| `--block-size` | int | `16` | `KVROUTER_BLOCK_SIZE` |") {
		t.Fatalf("generated reference lacks the block-size row:\n%.500s", b)
	}
}

func TestHelpAndErrors(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-h"}, &out); err != nil || !strings.Contains(out.String(), "documents:") {
		t.Fatalf("-h: %v %q", err, out.String())
	}
	if err := run([]string{"nope", filepath.Join(t.TempDir(), "x")}, &out); err == nil {
		t.Fatal("an unknown document must be an error")
	}
}
