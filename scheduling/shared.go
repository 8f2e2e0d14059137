package scheduling

// SharedBeyondDevice is how many blocks of the prompt's shared-tier
// prefix lie beyond a worker's device prefix: the blocks it would load
// from the shared cache instead of computing. Dynamo's
// SharedCacheHits::hits_beyond(device_blocks) counts the shared hits at
// block positions ≥ device_blocks; our shared tier is a prefix index (the
// hits are the single range [0, shared)), so that count is
// max(0, shared − device).
func SharedBeyondDevice(device, shared uint32) uint32 {
	if shared <= device {
		return 0
	}
	return shared - device
}

// SharedCredit is the prefill blocks a worker is credited for the shared
// tier, as Dynamo computes it in lib/llm/src/kv_router.rs
// KvRouter::get_overlap_scores (shared_credit_blocks =
// shared_beyond_device_blocks × shared_cache_multiplier, added to the
// device, host and disk credits; seed
// /work/shared/seeds/000_542a90b10ea01ef5.txt) and in the selector's
// worker_logit:
//
//	shared_credit = shared_cache_multiplier × max(0, shared − device)
//
// A worker whose own device prefix already covers the shared prefix gains
// nothing; the others are credited for what they can load instead of
// prefill. Host and disk continuation do not reduce it (Dynamo measures
// beyond the device prefix only).
func SharedCredit(multiplier float64, device, shared uint32) float64 {
	beyond := SharedBeyondDevice(device, shared)
	if beyond == 0 || !(multiplier > 0) {
		return 0
	}
	return multiplier * float64(beyond)
}
