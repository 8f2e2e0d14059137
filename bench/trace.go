package bench

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// TraceBlockTokens is the Mooncake trace's block size: each hash id stands
// for 512 tokens of content.
const TraceBlockTokens = 512

// ErrBadTrace marks a trace line that cannot be replayed.
var ErrBadTrace = errors.New("bad trace record")

// TraceRecord is one line of a Mooncake FAST'25 trace.
type TraceRecord struct {
	TimestampMs  int64    `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// Validate checks that the hash ids cover the input exactly: one id per
// 512-token block, the last block possibly partial.
func (r TraceRecord) Validate() error {
	if r.TimestampMs < 0 {
		return fmt.Errorf("%w: negative timestamp %d", ErrBadTrace, r.TimestampMs)
	}
	if r.InputLength <= 0 || r.OutputLength < 0 {
		return fmt.Errorf("%w: input_length %d must be > 0 and output_length %d >= 0",
			ErrBadTrace, r.InputLength, r.OutputLength)
	}
	n := len(r.HashIDs)
	if n == 0 || r.InputLength > n*TraceBlockTokens || r.InputLength <= (n-1)*TraceBlockTokens {
		return fmt.Errorf("%w: %d hash ids do not cover input_length %d in %d-token blocks",
			ErrBadTrace, n, r.InputLength, TraceBlockTokens)
	}
	return nil
}

// ReadTrace parses JSON lines, keeping at most limit records (0 = all).
// Blank lines are skipped; any other malformed line is an error naming it.
func ReadTrace(r io.Reader, limit int) ([]TraceRecord, error) {
	if limit < 0 {
		return nil, fmt.Errorf("%w: limit must be >= 0, got %d", ErrBadTrace, limit)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []TraceRecord
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec TraceRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line, err)
		}
		if err := rec.Validate(); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, rec)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return out, nil
}

// LoadTrace reads a trace file (gzip-compressed when its name ends in
// .gz); path "" reads the embedded Mooncake conversation trace.
func LoadTrace(path string, limit int) ([]TraceRecord, error) {
	f, err := openTrace(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := ReadTrace(f, limit)
	if err != nil {
		if path == "" {
			path = EmbeddedTraceName
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// TraceBlock is the content a hash id stands for: 512 token ids drawn
// from a generator seeded by the id alone, so equal ids give equal blocks
// in every request and at every router block size dividing 512.
func TraceBlock(hashID uint64) []uint32 {
	r := rand.New(rand.NewPCG(hashID, 0x6d6f6f6e63616b65)) // "mooncake"
	return randomTokens(make([]uint32, 0, TraceBlockTokens), r, TraceBlockTokens)
}

// TraceSynth expands trace records into token ids, remembering each hash
// id's block so shared prefixes are generated once.
type TraceSynth struct {
	blocks map[uint64][]uint32
}

// NewTraceSynth returns an empty expansion cache.
func NewTraceSynth() *TraceSynth { return &TraceSynth{blocks: make(map[uint64][]uint32)} }

// Tokens returns the record's prompt: its hash ids' blocks concatenated
// and cut to input_length.
func (s *TraceSynth) Tokens(rec TraceRecord) ([]uint32, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	out := make([]uint32, 0, len(rec.HashIDs)*TraceBlockTokens)
	for _, id := range rec.HashIDs {
		b, ok := s.blocks[id]
		if !ok {
			b = TraceBlock(id)
			s.blocks[id] = b
		}
		out = append(out, b...)
	}
	return out[:rec.InputLength], nil
}

// TraceRequests turns records into a schedule: arrivals are the trace's
// timestamps relative to the first, divided by speedup. A request asking
// for no output still asks for one token, since TTFT needs a token.
func TraceRequests(recs []TraceRecord, speedup float64) ([]Request, error) {
	if !(speedup > 0) || math.IsInf(speedup, 0) {
		return nil, fmt.Errorf("%w: speedup must be a positive number, got %v", ErrBadWorkload, speedup)
	}
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b TraceRecord) int { return cmp.Compare(a.TimestampMs, b.TimestampMs) })
	synth := NewTraceSynth()
	out := make([]Request, len(sorted))
	for i, rec := range sorted {
		toks, err := synth.Tokens(rec)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		offset := float64(rec.TimestampMs-sorted[0].TimestampMs) / speedup
		out[i] = Request{
			ID:      fmt.Sprintf("trace-%d", i),
			Arrival: time.Duration(offset * float64(time.Millisecond)),
			Prompt:  Prompt{Tokens: toks, MaxTokens: max(1, rec.OutputLength)},
		}
	}
	return out, nil
}
