package kv

import (
	"testing"
	"unsafe"
)

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

func TestSequenceHashViewAliases(t *testing.T) {
	raw := []uint64{7, 1 << 63}
	seq := AsSequenceHashes(raw)
	if len(seq) != 2 || seq[1] != SequenceHash(1<<63) || &raw[0] != (*uint64)(unsafe.Pointer(&seq[0])) {
		t.Fatalf("view %v of %v must share its memory", seq, raw)
	}
	if AsSequenceHashes(nil) != nil || AsSequenceHashes([]uint64{}) != nil {
		t.Fatal("empty views are nil")
	}
}
