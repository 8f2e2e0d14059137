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
	out := make([]H, 0, len(hashes)/stride)
	for i := stride - 1; i < len(hashes); i += stride {
		out = append(out, hashes[i])
	}
	return out
}
