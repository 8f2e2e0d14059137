package mockengine

import (
	"context"
	"io"
	"sync"
)

// Stream delivers one submitted request's tokens as the engine produces
// them. It buffers without bound (at most MaxTokens outputs), so a slow
// reader never stalls the engine.
type Stream struct {
	// ID is the request id inside the engine.
	ID string
	// DpRank is the rank serving the request.
	DpRank uint32
	// PromptTokens is the prompt length.
	PromptTokens int

	runner *rankRunner
	notify chan struct{} // capacity 1: "something changed"
	mu     sync.Mutex
	buf    []Output
	err    error // set once the stream ends: io.EOF when finished
}

func newStream(id string, rank uint32, promptTokens int, rr *rankRunner) *Stream {
	return &Stream{ID: id, DpRank: rank, PromptTokens: promptTokens, runner: rr, notify: make(chan struct{}, 1)}
}

// Next waits for outputs and returns every one not yet read. After the
// last token it returns io.EOF; if the engine stopped first, ErrStopped.
func (s *Stream) Next(ctx context.Context) ([]Output, error) {
	for {
		s.mu.Lock()
		out, err := s.buf, s.err
		s.buf = nil
		s.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Cancel aborts the request, releasing its blocks at once. Cancelling a
// finished stream does nothing.
func (s *Stream) Cancel() {
	s.runner.abort(s)
}

// push is called by the engine with the rank's lock held.
func (s *Stream) push(o Output) {
	s.mu.Lock()
	s.buf = append(s.buf, o)
	if o.Finished && s.err == nil {
		s.err = io.EOF
	}
	s.mu.Unlock()
	s.signal()
}

// end closes the stream with err unless it already ended.
func (s *Stream) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}
