package mockengine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Limits that keep a misconfigured worker from allocating absurd amounts
// of memory for its block table.
const (
	MaxBlockSize     = 1 << 12
	MaxTotalKVBlocks = 1 << 24
	MaxDPSize        = 256
)

// Config describes one simulated engine. The timing defaults describe a
// mid-sized model on one GPU: a 2,000-token prompt costs about 110 ms of
// prefill, a decode step of 64 sequences about 16 ms.
type Config struct {
	// WorkerID is the identity the engine reports in its KV events.
	WorkerID kv.WorkerID
	// ModelName is reported in responses, metrics and heartbeats.
	ModelName string
	// BlockSize is the number of tokens in one KV block. It must equal the
	// router's block size or no hash will ever match.
	BlockSize int
	// TotalKVBlocks is the capacity of each rank's KV cache, in blocks.
	TotalKVBlocks int
	// DPSize is the number of data-parallel ranks; each has its own cache
	// and scheduler.
	DPSize int
	// MaxNumSeqs bounds the running requests of one rank.
	MaxNumSeqs int
	// MaxNumBatchedTokens bounds the tokens (prefill chunk plus one per
	// decoding request) of one step.
	MaxNumBatchedTokens int
	// PrefillTokensPerSec is the throughput of prompt processing; only
	// tokens missing from the prefix cache are processed, which is what
	// makes cache hits cut time to first token.
	PrefillTokensPerSec float64
	// StepBaseTime is the fixed cost of any forward pass (reading the
	// weights), paid by every step.
	StepBaseTime time.Duration
	// DecodeTimePerSeq is the extra cost of each decoding request in a
	// step, so inter-token latency grows with the batch.
	DecodeTimePerSeq time.Duration
	// DecodeKVTokensPerSec is how many tokens of KV cache a step's decode
	// attention reads per second (HBM bandwidth / KV bytes per token): a
	// step whose decoding requests hold C tokens of context in total
	// costs C/DecodeKVTokensPerSec more, so long contexts in decode slow
	// every step of the rank, prefill chunks included. 0 leaves it out.
	DecodeKVTokensPerSec float64
	// Speedup divides every simulated duration when running in real time,
	// keeping the ratios: 10 makes a 100 ms step take 10 ms.
	Speedup float64
	// KVBytesPerToken is the KV cache's size per token (layers × KV heads
	// × head dim × 2 × dtype bytes; Model.KVBytesPerToken for a preset):
	// what a KV transfer of disaggregated serving moves.
	KVBytesPerToken float64
	// KVTransferGbps is the bandwidth of KV transfers between a prefill
	// and a decode engine, in gigabits per second (0: transfers take no
	// time).
	KVTransferGbps float64
	// TemplateSkew makes this engine's chat template differ from the
	// router's for some models: a chat for model NAME gets
	// TemplateSkew[NAME] extra copies of its first token in front (a
	// doubled BOS, the classic template mismatch), in /tokenize too. The
	// token count then differs by that many and every block hash with it.
	TemplateSkew map[string]int
}

// MaxTemplateSkew bounds TemplateSkew's counts.
const MaxTemplateSkew = 64

// skewChat applies TemplateSkew to a chat prompt of model.
func (c Config) skewChat(model string, ids []uint32) []uint32 {
	n := c.TemplateSkew[model]
	if n <= 0 || len(ids) == 0 {
		return ids
	}
	out := make([]uint32, 0, n+len(ids))
	for range n {
		out = append(out, ids[0])
	}
	return append(out, ids...)
}

// Defaults of the KV transfer model: Llama-3-8B's 128 KiB per token (32
// layers × 8 KV heads × 128 × 2 × BF16), over one 400 Gb/s NIC per GPU
// (a DGX H100 has one ConnectX-7 400 Gb/s port per GPU for NIXL/RDMA).
const (
	DefaultKVBytesPerToken = 32 * 8 * 128 * 2 * 2
	DefaultKVTransferGbps  = 400
)

// DefaultConfig returns the defaults of the mock worker. The cache and
// batch limits are those of Dynamo's mocker and vLLM; the block size is
// the router's default.
func DefaultConfig() Config {
	return Config{
		ModelName:           "mock-model",
		BlockSize:           16,
		TotalKVBlocks:       16384,
		DPSize:              1,
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 8192,
		PrefillTokensPerSec: 20000,
		StepBaseTime:        10 * time.Millisecond,
		DecodeTimePerSeq:    100 * time.Microsecond,
		Speedup:             1,
		KVBytesPerToken:     DefaultKVBytesPerToken,
		KVTransferGbps:      DefaultKVTransferGbps,
	}
}

// ErrInvalidConfig marks every configuration error.
var ErrInvalidConfig = errors.New("invalid mock engine config")

// Validate reports the first field out of range.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.BlockSize <= 0 || c.BlockSize > MaxBlockSize:
		return bad("block size %d not in [1, %d]", c.BlockSize, MaxBlockSize)
	case c.TotalKVBlocks <= 0 || c.TotalKVBlocks > MaxTotalKVBlocks:
		return bad("total kv blocks %d not in [1, %d]", c.TotalKVBlocks, MaxTotalKVBlocks)
	case c.DPSize <= 0 || c.DPSize > MaxDPSize:
		return bad("dp size %d not in [1, %d]", c.DPSize, MaxDPSize)
	case c.MaxNumSeqs <= 0:
		return bad("max num seqs %d must be positive", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return bad("max num batched tokens %d must be positive", c.MaxNumBatchedTokens)
	case !(c.PrefillTokensPerSec > 0):
		return bad("prefill tokens per second %v must be positive", c.PrefillTokensPerSec)
	case c.StepBaseTime < 0 || c.DecodeTimePerSeq < 0:
		return bad("step times must not be negative (base %v, per seq %v)", c.StepBaseTime, c.DecodeTimePerSeq)
	case !(c.DecodeKVTokensPerSec >= 0) || math.IsInf(c.DecodeKVTokensPerSec, 0):
		return bad("decode KV tokens per second %v must be a number >= 0", c.DecodeKVTokensPerSec)
	case !(c.Speedup > 0):
		return bad("speedup %v must be positive", c.Speedup)
	case !(c.KVBytesPerToken >= 0) || math.IsInf(c.KVBytesPerToken, 0):
		return bad("KV bytes per token %v must be a number >= 0", c.KVBytesPerToken)
	case !(c.KVTransferGbps >= 0) || math.IsInf(c.KVTransferGbps, 0):
		return bad("KV transfer bandwidth %v Gb/s must be a number >= 0", c.KVTransferGbps)
	}
	for model, n := range c.TemplateSkew {
		if n < 0 || n > MaxTemplateSkew {
			return bad("template skew %d for model %q not in [0, %d]", n, model, MaxTemplateSkew)
		}
	}
	return nil
}

// stepDuration is the model time of one step: prefillTokens of prompt
// and decodeSeqs decoding requests holding decodeContext tokens of KV.
func (c Config) stepDuration(prefillTokens, decodeSeqs, decodeContext int) time.Duration {
	prefill := time.Duration(float64(prefillTokens) / c.PrefillTokensPerSec * float64(time.Second))
	var kvRead time.Duration
	if c.DecodeKVTokensPerSec > 0 {
		kvRead = time.Duration(float64(decodeContext) / c.DecodeKVTokensPerSec * float64(time.Second))
	}
	return c.StepBaseTime + time.Duration(decodeSeqs)*c.DecodeTimePerSeq + kvRead + prefill
}

// realDuration scales a model duration to wall-clock time.
func (c Config) realDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.Speedup)
}
