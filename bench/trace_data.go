package bench

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"os"
	"strings"
)

// mooncakeConversation is the Mooncake FAST'25 conversation trace,
// gzip-compressed; data/mooncake/NOTICE gives its source and license
// (Apache-2.0).
//
//go:embed data/mooncake/conversation_trace.jsonl.gz
var mooncakeConversation []byte

// EmbeddedTraceName names the embedded trace in messages and reports.
const EmbeddedTraceName = "mooncake conversation_trace.jsonl (embedded)"

// openTrace opens a trace: path "" is the embedded Mooncake conversation
// trace; a path ending in .gz is decompressed.
func openTrace(path string) (io.ReadCloser, error) {
	var r io.ReadCloser
	if path == "" {
		r = io.NopCloser(bytes.NewReader(mooncakeConversation))
		path = ".gz"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		r = f
	}
	if !strings.HasSuffix(path, ".gz") {
		return r, nil
	}
	zr, err := gzip.NewReader(r)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open trace: %w", err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, closers{zr, r}}, nil
}

type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
