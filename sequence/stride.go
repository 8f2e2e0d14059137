package sequence

// Sample keeps one sequence hash per stride blocks: the hash ending each
// whole group of stride blocks (indices stride-1, 2·stride-1, …). Because
// sequence hashes are chained, the kept hash still names its whole prefix,
// so two prompts share a sampled hash exactly when they share that many
// blocks. A trailing group shorter than stride keeps no hash: its blocks
// count as the request's own. With stride ≤ 1 it returns hashes itself.
func Sample[H ~uint64](hashes []H, stride int) []H {
	if stride <= 1 {
		return hashes
	}
	return AppendSample(make([]H, 0, SampledCount(len(hashes), stride)), hashes, stride)
}

// AppendSample appends Sample(hashes, stride) to dst, converting the hash
// type (a decision keeps its sampled hashes as the wire's uint64s). With
// stride ≤ 1 every hash is appended.
func AppendSample[D, H ~uint64](dst []D, hashes []H, stride int) []D {
	stride = max(stride, 1)
	for i := stride - 1; i < len(hashes); i += stride {
		dst = append(dst, D(hashes[i]))
	}
	return dst
}

// SampledCount is how many hashes Sample keeps of n.
func SampledCount(n, stride int) int {
	return n / max(stride, 1)
}
