package mockengine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A preset is a mock engine whose cache size and speeds are derived from
// public numbers about a model on a GPU, so a benchmark's fleet holds as
// many prompts and computes them as fast as a real one would. Each number
// below says where it comes from; the derivation is Derive.

// Model is what a preset needs to know about a model.
type Model struct {
	Name string
	// Params is the parameter count; a token costs 2·Params FLOPs of
	// matrix products in prefill, and a decode step reads every weight.
	Params float64
	// Layers, KVHeads and HeadDim shape the KV cache: each token stores a
	// key and a value of KVHeads×HeadDim per layer.
	Layers, KVHeads, HeadDim int
	// WeightBytes and KVBytes are bytes per weight and per KV element
	// (2 for BF16/FP16, 1 for FP8).
	WeightBytes, KVBytes float64
}

// KVBytesPerToken is layers × kv heads × head dim × 2 (K and V) × dtype.
func (m Model) KVBytesPerToken() float64 {
	return float64(m.Layers*m.KVHeads*m.HeadDim*2) * m.KVBytes
}

// GPU is what a preset needs to know about an accelerator.
type GPU struct {
	Name string
	// HBMBytes is the memory the driver reports; HBMBytesPerSec its
	// bandwidth; DenseFLOPS the dense BF16 tensor throughput.
	HBMBytes, HBMBytesPerSec, DenseFLOPS float64
}

// Serving is how the engine uses the GPU.
type Serving struct {
	// MemoryUtilization is the fraction of HBM the engine takes (vLLM's
	// gpu_memory_utilization); ReservedBytes the part of it that is
	// neither weights nor KV cache (activations of a full batch, CUDA
	// graphs, the runtime).
	MemoryUtilization float64
	ReservedBytes     float64
	// PrefillMFU is the fraction of DenseFLOPS a prefill achieves.
	PrefillMFU          float64
	BlockSize           int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
}

// Hardware and model facts, with their sources.
var (
	// H100SXM80GB: 81,559 MiB as nvidia-smi reports an "H100 80GB HBM3"
	// (e.g. the nvidia-smi tables in vllm-project/vllm issue reports);
	// 3.35 TB/s of HBM3 and 989 TFLOPS dense BF16 (NVIDIA H100 SXM
	// datasheet; modal.com/gpu-glossary/perf/memory-bandwidth lists the
	// same).
	H100SXM80GB = GPU{Name: "H100 SXM 80GB", HBMBytes: 81559 << 20, HBMBytesPerSec: 3.35e12, DenseFLOPS: 989e12}

	// Llama3_8B: meta-llama/Meta-Llama-3-8B config.json on Hugging Face:
	// num_hidden_layers 32, num_key_value_heads 8, head_dim 128
	// (hidden_size 4096 / 32 attention heads), torch_dtype bfloat16; 8.03 B
	// parameters (model card). KV: 32×8×128×2×2 = 128 KiB per token, as
	// Hugging Face's Llama 3.1 blog tabulates (0.125 GB per 1k tokens for
	// 8B in FP16).
	Llama3_8B = Model{Name: "Llama-3-8B", Params: 8.03e9, Layers: 32, KVHeads: 8, HeadDim: 128, WeightBytes: 2, KVBytes: 2}

	// VLLMDefaults: gpu_memory_utilization 0.9 (vLLM's default, see
	// vllm-project/vllm#1018); max_num_seqs 256 and max_num_batched_tokens
	// 8192 (vLLM's online-serving defaults on 80 GB GPUs, and Dynamo's
	// mocker's); block size 16 (vLLM's and this router's default). The
	// 4 GB reserve is an estimate (vLLM profiles the peak activation
	// memory of a max_num_batched_tokens batch and keeps it; CUDA graphs
	// and the runtime take the rest). Prefill MFU 0.53: llm-d calibrated
	// vLLM's prefill at 15,928 tokens/s for Qwen3-32B (32.8 B parameters)
	// on two H100s (TP=2) — its peakPrefillThroughput default, measured as
	// chunk size / median TTFT on an idle server (llm-d
	// guides/workload-autoscaling) — which is 15,928 × 2 × 32.8e9 FLOPs
	// over 2 × 989 TFLOPS.
	VLLMDefaults = Serving{MemoryUtilization: 0.9, ReservedBytes: 4e9, PrefillMFU: 0.53,
		BlockSize: 16, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192}
)

// Derive builds an engine config for model on gpu served as s:
//
//	cache blocks     = (HBM × utilization − weights − reserve) / (KV bytes per token × block size)
//	prefill tokens/s = MFU × dense FLOPS / (2 × params)
//	step base time   = weight bytes / HBM bandwidth  (a decode step reads every weight)
//	decode KV tok/s  = HBM bandwidth / KV bytes per token  (each step reads its decodes' KV)
//
// It ignores the attention FLOPs of long prompts (about a fifth more
// compute at 13k tokens for an 8B model), so long prefills run a little
// faster than on the real GPU.
func Derive(model Model, gpu GPU, s Serving) (Config, error) {
	weights := model.Params * model.WeightBytes
	kvBytes := gpu.HBMBytes*s.MemoryUtilization - weights - s.ReservedBytes
	perBlock := model.KVBytesPerToken() * float64(s.BlockSize)
	if !(kvBytes > 0) || !(perBlock > 0) {
		return Config{}, fmt.Errorf("%w: %s does not fit on %s (%.1f GB left for KV)", ErrInvalidConfig, model.Name, gpu.Name, kvBytes/1e9)
	}
	c := DefaultConfig()
	c.ModelName = model.Name
	c.BlockSize = s.BlockSize
	c.TotalKVBlocks = int(kvBytes / perBlock)
	c.MaxNumSeqs = s.MaxNumSeqs
	c.MaxNumBatchedTokens = s.MaxNumBatchedTokens
	c.PrefillTokensPerSec = s.PrefillMFU * gpu.DenseFLOPS / (2 * model.Params)
	c.StepBaseTime = time.Duration(weights / gpu.HBMBytesPerSec * float64(time.Second))
	c.DecodeTimePerSeq = 0 // the per-request cost is the KV it reads
	c.DecodeKVTokensPerSec = gpu.HBMBytesPerSec / model.KVBytesPerToken()
	c.KVBytesPerToken = model.KVBytesPerToken()
	return c, c.Validate()
}

// PresetH100Llama3_8B is Llama-3-8B in BF16 on one H100 SXM 80GB under
// vLLM's defaults: 27,136 blocks of 16 tokens (434k tokens; GIE's
// approximate prefix scorer assumes "about 500K tokens" for the same
// pair, llm-d-inference-scheduler's DefaultLRUCapacityPerServer), prefill
// at 32.6k tokens/s (a 13k-token Mooncake prompt in 0.4 s), a 4.8 ms
// decode step plus 39 ns per token of context (NVIDIA's NIM benchmarks
// report 4.63 ms inter-token latency for Llama-3.1-8B-Instruct on an H100
// at concurrency 1).
const PresetH100Llama3_8B = "h100-llama3-8b"

var presets = map[string]func() (Config, error){
	PresetH100Llama3_8B: func() (Config, error) { return Derive(Llama3_8B, H100SXM80GB, VLLMDefaults) },
}

// ErrUnknownPreset: a preset name not in Presets.
var ErrUnknownPreset = errors.New("unknown mock engine preset")

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns the engine config of a preset. Its WorkerID, DPSize and
// Speedup are the defaults; callers set them.
func Preset(name string) (Config, error) {
	build, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("%w %q (want one of %s)", ErrUnknownPreset, name, strings.Join(Presets(), ", "))
	}
	return build()
}

// PresetArg finds a --preset value in command-line arguments before they
// are parsed (flag syntax: -preset x, --preset x, -preset=x, --preset=x;
// scanning stops at "--"), so a command can make the preset its flags'
// defaults and let explicit flags win. The last one counts, as with flag.
func PresetArg(args []string) (preset string, found bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "preset" {
			continue
		}
		found = true
		switch {
		case hasValue:
			preset = value
		case i+1 < len(args):
			i++
			preset = args[i]
		default:
			preset = ""
		}
	}
	return preset, found
}
