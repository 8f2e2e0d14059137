package kv

import "testing"

func TestHashViewsAlias(t *testing.T) {
	raw := []uint64{1, 2, 1 << 63}
	local := AsLocalHashes(raw)
	if len(local) != 3 || local[2] != LocalBlockHash(1<<63) {
		t.Fatalf("view %v of %v", local, raw)
	}
	back := LocalHashesAsUint64(local)
	if &back[0] != &raw[0] || back[1] != 2 {
		t.Fatal("the views must share the memory")
	}
	if AsLocalHashes(nil) != nil || LocalHashesAsUint64([]LocalBlockHash{}) != nil {
		t.Fatal("empty views are nil")
	}
}
