// Command gendocs writes the reference documents generated from the code:
//
//	gendocs metrics docs/metrics.md
//	gendocs grpc docs/grpc-api.md
//
// Run from the repository's root (`make docs` does).
package main

import (
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/internal/docgen"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gendocs metrics|grpc OUTPUT")
		os.Exit(2)
	}
	var (
		text string
		err  error
	)
	switch os.Args[1] {
	case "metrics":
		text, err = docgen.Metrics(".")
	case "grpc":
		text, err = docgen.GRPC(".")
	default:
		err = fmt.Errorf("unknown document %q (metrics, grpc)", os.Args[1])
	}
	if err == nil {
		err = os.WriteFile(os.Args[2], []byte(text), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
