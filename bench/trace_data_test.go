package bench

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

// The embedded trace is the Mooncake conversation trace: 12,031 lines,
// the first at timestamp 0 (data/mooncake/NOTICE).
func TestEmbeddedTraceLoads(t *testing.T) {
	recs, err := LoadTrace("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 12031 {
		t.Fatalf("embedded trace has %d records, want 12031", len(recs))
	}
	if recs[0].TimestampMs != 0 || recs[0].InputLength <= 0 {
		t.Fatalf("first record %+v", recs[0])
	}
	few, err := LoadTrace("", 5)
	if err != nil || len(few) != 5 || few[4].TimestampMs != recs[4].TimestampMs {
		t.Fatalf("limit 5: %d records, %v", len(few), err)
	}
}

func TestLoadTraceGzipFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if _, err := zw.Write([]byte(tinyTrace)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := LoadTrace(path, 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("got %d records, %v", len(recs), err)
	}
	plain := filepath.Join(t.TempDir(), "not-gzip.gz")
	if err := os.WriteFile(plain, []byte(tinyTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTrace(plain, 0); err == nil {
		t.Fatal("a .gz file that is not gzip was accepted")
	}
}
