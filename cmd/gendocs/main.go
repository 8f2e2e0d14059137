// Command gendocs writes the reference documents generated from the code
// (`make docs`); each has a test in its package that fails when the
// committed file differs from what this produces.
//
//	gendocs config FILE   the flag reference (docs/configuration.md) from config's flag definitions
//	gendocs metrics FILE  the metrics reference (docs/metrics.md) from the registered collectors
//	gendocs grpc FILE     the gRPC reference (docs/grpc-api.md) from the proto comments
//	gendocs http FILE     the HTTP reference (docs/http-api.md) from docs/openapi.yaml
//
// Run from the repository's root (`make docs` does).
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/docgen"
)

const usage = `usage: gendocs <document> FILE

documents:
  config   the flag reference (docs/configuration.md), from the flag definitions in config/
  metrics  the metrics reference (docs/metrics.md), from the registered collectors
  grpc     the gRPC reference (docs/grpc-api.md), from messages/kvrouterv1/router.proto
  http     the HTTP reference (docs/http-api.md), from docs/openapi.yaml
`

var generators = map[string]func(io.Writer) error{
	"config":  config.WriteMarkdown,
	"metrics": fromRoot(docgen.Metrics),
	"grpc":    fromRoot(docgen.GRPC),
	"http":    fromRoot(docgen.HTTP),
}

// fromRoot adapts a generator that reads the repository (from the
// current directory, its root) and returns the document.
func fromRoot(gen func(root string) (string, error)) func(io.Writer) error {
	return func(w io.Writer) error {
		text, err := gen(".")
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, text)
		return err
	}
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		_, err := fmt.Fprint(stdout, usage)
		return err
	}
	if len(args) != 2 {
		return fmt.Errorf("want a document and a file\n%s", usage)
	}
	gen, ok := generators[args[0]]
	if !ok {
		return fmt.Errorf("unknown document %q\n%s", args[0], usage)
	}
	// Generate fully before writing, so a failure leaves the file as it was.
	var buf bytes.Buffer
	if err := gen(&buf); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	return os.WriteFile(args[1], buf.Bytes(), 0o644)
}
