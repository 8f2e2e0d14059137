package receipts

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestRingBoundedByEntries(t *testing.T) {
	r := New(3, 1<<20)
	for i := range 5 {
		if !r.Put(fmt.Sprint("r", i), []byte(fmt.Sprintf(`{"i":%d}`, i))) {
			t.Fatalf("put %d refused", i)
		}
	}
	if r.Len() != 3 {
		t.Fatalf("len %d, want 3", r.Len())
	}
	for i := range 5 {
		_, ok := r.Get(fmt.Sprint("r", i))
		if want := i >= 2; ok != want {
			t.Errorf("r%d held %v, want %v", i, ok, want)
		}
	}
	if got, _ := r.Get("r4"); string(got) != `{"i":4}` {
		t.Errorf("r4 = %s", got)
	}
}

func TestRingBoundedByBytes(t *testing.T) {
	r := New(100, 25)
	for i := range 4 {
		r.Put(fmt.Sprint("r", i), []byte(strings.Repeat("x", 10)))
	}
	if r.Bytes() > 25 || r.Len() != 2 {
		t.Fatalf("len %d bytes %d, want 2 entries within 25 bytes", r.Len(), r.Bytes())
	}
	if _, ok := r.Get("r1"); ok {
		t.Error("r1 outlived the byte bound")
	}
	if r.Put("big", []byte(strings.Repeat("x", 26))) {
		t.Error("a receipt over the byte bound was kept")
	}
	if _, ok := r.Get("r3"); !ok {
		t.Error("refusing an oversized receipt evicted r3")
	}
	if r.Put("", []byte("{}")) {
		t.Error("a receipt without a request id was kept")
	}
}

func TestRingReplacesAnID(t *testing.T) {
	r := New(2, 1<<20)
	r.Put("a", []byte("1"))
	r.Put("a", []byte("2"))
	if got, _ := r.Get("a"); string(got) != "2" {
		t.Fatalf("a = %s, want the newer receipt", got)
	}
	r.Put("b", []byte("3")) // evicts a's first receipt only
	if got, ok := r.Get("a"); !ok || string(got) != "2" {
		t.Fatalf("a = %s %v after its stale entry was evicted", got, ok)
	}
	r.Put("c", []byte("4"))
	if _, ok := r.Get("a"); ok {
		t.Fatal("a outlived the entry bound")
	}
}

func TestRingConcurrent(t *testing.T) {
	r := New(16, 1<<10)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 1000 {
			r.Put(fmt.Sprint(i%40), []byte("{}"))
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 1000 {
			r.Get(fmt.Sprint(i % 40))
		}
	}()
	wg.Wait()
	if r.Len() > 16 {
		t.Fatalf("len %d over 16", r.Len())
	}
}
