package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The bounds derived from the golden tokenizers' files.
func TestGoldenBounds(t *testing.T) {
	want := map[string]Bound{
		"qwen3":            {512, 128}, // NFC: 4 × the 128-space token; ASCII: 128
		"llama3_1":         {128, 128},
		"deepseek_v3":      {128, 128},
		"gptoss":           {128, 128},
		"gemma3":           {93, 93}, // 31 × "▁" (3 bytes) after Replace(" ", "▁"), which only lengthens
		"llama2":           {48, 48},
		"llama2_metaspace": {48, 48},
	}
	for _, name := range goldenModels {
		if got := golden(t, name).Bound(); got != want[name] {
			t.Errorf("%s: bound %+v, want %+v", name, got, want[name])
		}
	}
}

// The lower bound never exceeds the reference's count, and EncodeLimit
// at exactly the reference's count gives the reference's ids, one below
// it a LimitError: on every golden text of every tokenizer.
func TestEncodeLimitAgainstGoldens(t *testing.T) {
	for _, name := range goldenModels {
		tok := golden(t, name)
		for i, c := range readGolden(t, name).Cases {
			for _, v := range []struct {
				special bool
				want    []uint32
			}{{true, c.IDs}, {false, c.IDsNoSpecial}} {
				if len(v.want) == 0 {
					continue
				}
				if m := tok.minTokens(c.Text); m > len(v.want) {
					t.Fatalf("%s case %d: lower bound %d > %d tokens", name, i, m, len(v.want))
				}
				got, err := tok.EncodeLimit(c.Text, v.special, len(v.want))
				if err != nil || !slices.Equal(got, v.want) {
					t.Fatalf("%s case %d special=%v: at the limit: err %v, ids equal %v", name, i, v.special, err, slices.Equal(got, v.want))
				}
				if len(v.want) == 1 {
					continue // a limit of 0 is no limit
				}
				_, err = tok.EncodeLimit(c.Text, v.special, len(v.want)-1)
				var le *LimitError
				if !errors.As(err, &le) || !errors.Is(err, ErrTooManyTokens) {
					t.Fatalf("%s case %d special=%v: one under the limit: err %v", name, i, v.special, err)
				}
			}
		}
	}
}

// A long text over the limit is refused from its length without
// tokenizing; one that passes the length test stops soon after the limit.
func TestEncodeLimitStopsEarly(t *testing.T) {
	tok := golden(t, "qwen3")
	huge := strings.Repeat("a", 8<<20)
	start := time.Now()
	_, err := tok.EncodeLimit(huge, true, 4096)
	var le *LimitError
	if !errors.As(err, &le) || !le.ByLength || le.MinTokens <= 4096 {
		t.Fatalf("8 MB over a 4096-token limit: %v", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("refusing from the length took %v", d)
	}
	// English: 4 bytes per token on average, far under the bound of 128
	// ASCII bytes per token, so the length does not decide: the encoder
	// stops.
	en := strings.Repeat(benchText(t, "bench_en.txt"), 8) // ~136 kB, ~34k tokens
	_, err = tok.EncodeLimit(en, false, 2000)
	if !errors.As(err, &le) || le.ByLength || le.Tokens < 1900 || le.Tokens > 2100 {
		t.Fatalf("English over a 2000-token limit: %v", err)
	}
	// One piece longer than the limit allows is never merged: 600 kB of
	// U+3000 IDEOGRAPHIC SPACE passes the length test (NFC may shrink
	// non-ASCII text: 512 bytes per token), but as one piece of 128-byte
	// tokens at most it cannot fit.
	_, err = tok.EncodeLimit("x"+strings.Repeat("\u3000", 200000)+"y", false, 1200)
	if !errors.As(err, &le) || le.ByLength || le.Tokens > 1 {
		t.Fatalf("a 600 kB run of spaces over a 1200-token limit: %v (want a stop before the run is merged)", err)
	}
}

// No code point shrinks by more than the factors the bound assumes.
func TestNormalizerShrinkFactors(t *testing.T) {
	forms := []struct {
		name   string
		f      func(string) string
		factor int
	}{
		{"NFC", nfc, unicodeFormShrink}, {"NFD", norm.NFD.String, unicodeFormShrink},
		{"NFKC", norm.NFKC.String, unicodeFormShrink}, {"NFKD", norm.NFKD.String, unicodeFormShrink},
		{"Lowercase", strings.ToLower, lowercaseShrink},
	}
	for _, fm := range forms {
		worst := 0.0
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if !utf8.ValidRune(r) {
				continue
			}
			s := string(r)
			out := fm.f(s)
			if len(s) > fm.factor*len(out) {
				t.Fatalf("%s(%U) = %q: %d bytes from %d, over the factor %d", fm.name, r, out, len(out), len(s), fm.factor)
			}
			if r < 0x80 && len(out) < 1 {
				t.Fatalf("%s(%U) lost an ASCII byte", fm.name, r)
			}
			worst = max(worst, float64(len(s))/float64(max(1, len(out))))
		}
		t.Logf("%s: worst single code point shrink %.2f (factor used %d)", fm.name, worst, fm.factor)
	}
	// Composition: three conjoining jamo make one syllable.
	if s := "\u1100\u1161\u11a8"; len(s) > unicodeFormShrink*len(nfc(s)) {
		t.Fatalf("NFC(%q) = %q", s, nfc(s))
	}
}

// Normal forms never shrink a text past the factor, nor below its ASCII
// bytes.
func FuzzNormalizerShrink(f *testing.F) {
	alphabet := []rune("aAkK \u0301\u0308\u0323\u0345\u0313\u0342\u212a\u2126\u212b\u1100\u1161\u11a8\uac00\U0001D400\U0001D41A\uff21\ufb01\u2fa1d\U0002F800\u037e\u1fef\u0130\u0049")
	f.Add([]byte{0, 5, 6, 1, 13, 14, 15})
	f.Fuzz(func(t *testing.T, b []byte) {
		var sb strings.Builder
		for _, c := range b {
			sb.WriteRune(alphabet[int(c)%len(alphabet)])
		}
		s := sb.String()
		for _, fm := range []func(string) string{nfc, norm.NFD.String, norm.NFKC.String, norm.NFKD.String} {
			out := fm(s)
			if len(s) > unicodeFormShrink*len(out) || CountASCII(s) > len(out) {
				t.Fatalf("%q → %q", s, out)
			}
		}
		if out := strings.ToLower(s); len(s) > lowercaseShrink*len(out) || CountASCII(s) > len(out) {
			t.Fatalf("lower %q → %q", s, out)
		}
	})
}

func TestCountASCII(t *testing.T) {
	for _, s := range []string{"", "a", "abcdefgh", "abcdefghi", "é", "aé你好🙂bcdefghijk", strings.Repeat("x\u00e9", 20)} {
		want := 0
		for i := 0; i < len(s); i++ {
			if s[i] < 0x80 {
				want++
			}
		}
		if got := CountASCII(s); got != want {
			t.Errorf("CountASCII(%q) = %d, want %d", s, got, want)
		}
	}
}

// Long words from many goroutines at once share the pooled scratch
// safely (run under -race).
func TestConcurrentLongWords(t *testing.T) {
	tok := golden(t, "llama3_1")
	texts := []string{strings.Repeat("a", 5000), strings.Repeat(" ", 3000) + "x", strings.Repeat("ab=", 900), strings.Repeat("好", 700)}
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, false)
	}
	done := make(chan error, 4)
	for w := range 4 {
		go func() {
			for k := range 20 {
				i := (k + w) % len(texts)
				if got := tok.Encode(texts[i], false); !slices.Equal(got, want[i]) {
					done <- errors.New("a concurrent encoding differs")
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
