package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzTokenize: no input makes Encode or Decode panic, and decoding an
// encoding gives the text back where the family guarantees it: byte-level
// BPE (qwen3) gives back the text's NFC form (its normalizer), and
// SentencePiece-style BPE with byte fallback (llama2) gives back text
// without added tokens or "▁".
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"Hello world", "你好，世界", " \n\n\t x", "I'm 12345 🙂", "<|im_start|>user\nhi", "e\u0301", "\xff\xfe", "▁a  b"} {
		f.Add(s)
	}
	// Two tokenizers only: every fuzz worker loads them, and loading is
	// most of a 10 s fuzz run.
	names := []string{"qwen3", "llama2"}
	toks := make([]*Tokenizer, len(names))
	for i, n := range names {
		toks[i] = golden(f, n)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, tok := range toks {
			ids := tok.Encode(s, true)
			_ = tok.Decode(ids, true)
			if !utf8.ValidString(s) {
				continue
			}
			plain := tok.Encode(s, false)
			got := tok.Decode(plain, false)
			want := s
			switch names[i] {
			case "qwen3":
				want = norm.NFC.String(s)
			case "llama2":
				if strings.Contains(s, "\u2581") || tok.hasAdded(s) {
					continue
				}
			}
			if got != want {
				t.Fatalf("%s: decode(encode(%q)) = %q", names[i], s, got)
			}
		}
	})
}

// hasAdded reports whether text holds an added token.
func (t *Tokenizer) hasAdded(text string) bool {
	found := false
	t.sections(text, func(_ int, _ string, added int) bool { found = found || added >= 0; return true })
	return found
}

// splitAlphabet holds characters on which the reference's classes (ICU)
// and regexp2's (Go's unicode tables, .NET's \s) agree, with every class
// the patterns distinguish: letters of each case, marks, digits and other
// numbers, punctuation, symbols, spaces and line breaks, CJK and kana.
var splitAlphabet = []rune("aZ'sStTlLdDrReEvVmM09 \t\n\r\u00a0\u3000.,!?/-_\"#(){}[]@$+<>^`|~\u0301\u0308\u00e9\u00c9\u01c5\u02b0\u05d0\u4e00\u4f60\u3042\u30a2\u2160\u00bd\u0660\u00a7\u20ac\U0001F642\u200d")

// FuzzSplitters checks every hand-written split matcher against regexp2
// running the same pattern.
func FuzzSplitters(f *testing.F) {
	initClasses()
	f.Add([]byte("Hello, world! I'm here 12345 \n\n  x"))
	f.Add([]byte{3, 30, 31, 40, 41, 50, 51, 52, 60, 2, 2, 22, 23, 24})
	type pair struct {
		name     string
		hand, re splitter
	}
	var pairs []pair
	for pat := range handWritten {
		hand, ok, err := compilePattern(pat)
		if err != nil || !ok {
			f.Fatalf("pattern %q: hand-written %v, %v", pat, ok, err)
		}
		re, err := regexp2Splitter(pat)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{pat, hand, re})
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var sb strings.Builder
		for _, c := range b {
			sb.WriteRune(splitAlphabet[int(c)%len(splitAlphabet)])
		}
		s := sb.String()
		for _, p := range pairs {
			var got, want []string
			p.hand(s, func(x string, _ bool) bool { got = append(got, x); return true })
			p.re(s, func(x string, _ bool) bool { want = append(want, x); return true })
			if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("pattern %q on %q:\n hand-written %q\n regexp2      %q", p.name, s, got, want)
			}
		}
	})
}

func benchText(b testing.TB, name string) string {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		b.Fatal(err)
	}
	return string(raw)
}

// BenchmarkTokenize measures Encode on a 4k-token English prompt and a CJK
// prompt (testdata/golden/bench_*.txt) with a warm word cache, as a
// router serving traffic has. Compare with the reference under node:
// `make tokenizer-bench-node`.
func BenchmarkTokenize(b *testing.B) {
	for _, model := range []string{"qwen3", "llama3_1"} {
		tok := golden(b, model)
		for _, text := range []string{"bench_en.txt", "bench_zh.txt"} {
			s := benchText(b, text)
			b.Run(model+"/"+strings.TrimSuffix(strings.TrimPrefix(text, "bench_"), ".txt"), func(b *testing.B) {
				n := len(tok.Encode(s, false))
				dst := make([]uint32, 0, n)
				b.SetBytes(int64(len(s)))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					dst = tok.AppendEncode(dst[:0], s, false)
				}
				b.ReportMetric(float64(n), "tokens")
			})
			// Without the word cache: text the router has not seen
			// before (every piece merged from bytes).
			b.Run(model+"/"+strings.TrimSuffix(strings.TrimPrefix(text, "bench_"), ".txt")+"/cold", func(b *testing.B) {
				cold := *tok
				cold.model = &bpe{}
				*cold.model = *tok.model
				cold.model.cache = wordCache{}
				b.SetBytes(int64(len(s)))
				dst := make([]uint32, 0, len(s))
				for b.Loop() {
					dst = cold.AppendEncode(dst[:0], s, false)
				}
			})
		}
	}
}

// BenchmarkSplit compares the hand-written Llama-3 split with regexp2
// running the same pattern (the choice the package makes for the known
// patterns).
func BenchmarkSplit(b *testing.B) {
	initClasses()
	s := benchText(b, "bench_en.txt")
	hand, _, _ := compilePattern(patLlama3)
	re, err := regexp2Splitter(patLlama3)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sp   splitter
	}{{"handwritten", hand}, {"regexp2", re}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			n := 0
			for b.Loop() {
				c.sp(s, func(string, bool) bool { n++; return true })
			}
		})
	}
}

// The NFC fast path agrees with golang.org/x/text on any text.
func FuzzNFC(f *testing.F) {
	for _, s := range []string{"abc", "你好", "e\u0301", "カ\u3099", "\u302a\u302b", "ｆｕｌｌ", "\xff", "가\u11a8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := nfc(s), norm.NFC.String(s); got != want {
			t.Fatalf("nfc(%q) = %q, want %q", s, got, want)
		}
	})
}

// decode agrees with the standard decoder on any bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"a", "é", "你", "🙂", "\xed\xa0\x80", "\xe0\x80\x80", "\xc1\xbf", "\xe4\xbd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); {
			r, n := decode(s, i)
			wr, wn := utf8.DecodeRuneInString(s[i:])
			if r != wr || n != wn {
				t.Fatalf("decode(%q, %d) = %U %d, want %U %d", s, i, r, n, wr, wn)
			}
			i += n
		}
	})
}
