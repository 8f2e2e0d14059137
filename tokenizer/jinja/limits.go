package jinja

import (
	"strings"
	"sync/atomic"
	"time"
)

// A render is bounded in work, memory and time, whoever wrote the
// template (a model's own, or one a request brought with
// --trust-request-chat-template):
//
//   - maxSteps counts statements executed, operators, calls and filters,
//     loop iterations (an empty loop body still costs one per iteration),
//     the items that filters and methods walk (join, map, select, unique,
//     sort, ...) and the bytes string comparisons may read (bytesPerStep);
//   - maxValue bounds one string (bytes) and maxItems one list, checked
//     before anything is allocated (`'x' * 10**11` fails without
//     allocating), so no single operation can ask for more;
//   - maxAlloc bounds the bytes of every string and list a render builds,
//     summed, so a loop of large concatenations cannot grow the heap past
//     it either;
//   - maxOutput bounds the rendered text;
//   - renderTimeout is a wall-clock backstop for work none of the above
//     sees (comparing two long strings many times).
//
// A render that crosses any of them fails with a RenderError.
const (
	maxDepth = 200
	// itemBytes is what a list slot costs (an interface value).
	itemBytes = 16
)

// Variables so tests can lower them.
var (
	maxOutput           = 64 << 20
	maxValue      int64 = 64 << 20
	maxItems      int64 = 4 << 20
	maxSteps            = 5_000_000
	maxAlloc      int64 = 256 << 20
	renderTimeout       = 2 * time.Second
)

type renderer struct {
	steps int
	depth int
	// alloc is the bytes of strings and lists built so far.
	alloc   int64
	expired atomic.Bool
	out     *strings.Builder
}

// step counts n units of work and fails the render past maxSteps or
// renderTimeout.
func (r *renderer) step(n int) error {
	r.steps += n
	if r.steps > maxSteps {
		return errorf("template does too much work (over %d steps)", maxSteps)
	}
	if r.expired.Load() {
		return errorf("template rendering took longer than %v", renderTimeout)
	}
	return nil
}

// made charges a value an expression built to the render's memory budget
// and refuses one over the size limits.
func (r *renderer) made(v any, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	var n int64
	switch x := v.(type) {
	case string:
		if err := checkLen(int64(len(x))); err != nil {
			return nil, err
		}
		n = int64(len(x))
	case *List:
		if err := checkItems(int64(len(x.Items))); err != nil {
			return nil, err
		}
		n = int64(len(x.Items)) * itemBytes
	case *Dict:
		n = int64(x.Len()) * 2 * itemBytes
	}
	return v, r.charge(n)
}

// charge adds n bytes to what the render has built.
func (r *renderer) charge(n int64) error {
	r.alloc += n
	if r.alloc > maxAlloc {
		return errorf("template builds too much (over %d bytes of strings and lists)", maxAlloc)
	}
	return nil
}

// checkLen refuses a string of n bytes before it is built.
func checkLen(n int64) error {
	if n > maxValue || n < 0 {
		return errorf("template builds a string of over %d bytes", maxValue)
	}
	return nil
}

// checkItems refuses a list of n items before it is built.
func checkItems(n int64) error {
	if n > maxItems || n < 0 {
		return errorf("template builds a list of over %d items", maxItems)
	}
	return nil
}

// repeatSize is n copies of size units, or -1 past limit (no overflow).
func repeatSize(size int, n int64, limit int64) int64 {
	if n <= 0 || size == 0 {
		return 0
	}
	if int64(size) > limit/n {
		return -1
	}
	return int64(size) * n
}

// bytesPerStep is how many bytes a string comparison or search may read
// for one step: comparing two long strings is work the step count sees.
const bytesPerStep = 4096

// compareCost is the steps comparing or searching a and b may cost.
func compareCost(a, b any) int {
	n := 1
	if s, ok := a.(string); ok {
		n += len(s) / bytesPerStep
	}
	if s, ok := b.(string); ok {
		n += len(s) / bytesPerStep
	}
	return n
}
