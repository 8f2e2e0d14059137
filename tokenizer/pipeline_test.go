package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
)

func preTokenize(t *testing.T, cfg string, s string, first bool) []string {
	t.Helper()
	initClasses()
	p, _, err := buildPreTokenizer(json.RawMessage(cfg))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	p(s, first, func(x string) bool { out = append(out, x); return true })
	return out
}

// Split behaviors, Hugging Face tokenizers' documented example.
func TestSplitBehaviors(t *testing.T) {
	for behavior, want := range map[string]string{
		"Removed":            "the|final|countdown",
		"Isolated":           "the|-|final|-|-|countdown",
		"MergedWithPrevious": "the-|final-|-|countdown",
		"MergedWithNext":     "the|-final|-|-countdown",
		"Contiguous":         "the|-|final|--|countdown",
	} {
		got := preTokenize(t, `{"type":"Split","pattern":{"String":"-"},"behavior":"`+behavior+`","invert":false}`, "the-final--countdown", true)
		if strings.Join(got, "|") != want {
			t.Errorf("%s: %q, want %s", behavior, got, want)
		}
	}
}

func TestMetaspace(t *testing.T) {
	for _, tc := range []struct {
		cfg, in string
		first   bool
		want    string
	}{
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, "Hey  friend", false, "▁Hey|▁|▁friend"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`, "Hey you", true, "▁Hey▁you"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`, "Hey you", false, "Hey▁you"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":true}`, "Hey you", true, "Hey|▁you"},
		{`{"type":"Metaspace","replacement":"▁","add_prefix_space":true}`, " x", false, "▁x"},
		{`{"type":"Digits","individual_digits":true}`, "a12b3", true, "a|1|2|b|3"},
		{`{"type":"Digits","individual_digits":false}`, "a12b3", true, "a|12|b|3"},
		{`{"type":"WhitespaceSplit"}`, " a  b\u3000c ", true, "a|b|c"},
		{`{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`, "Hello world's", true, " Hello| world|'s"},
	} {
		if got := strings.Join(preTokenize(t, tc.cfg, tc.in, tc.first), "|"); got != tc.want {
			t.Errorf("%s on %q: %q, want %q", tc.cfg, tc.in, got, tc.want)
		}
	}
}

func TestUnsupportedComponentsAreClearErrors(t *testing.T) {
	for _, tj := range []string{
		`{"model":{"type":"Unigram","vocab":[]}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[]},"normalizer":{"type":"Precompiled"}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[],"dropout":0.1}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":["a"]}}`,
		`not json`,
	} {
		if _, err := FromJSON([]byte(tj), nil); err == nil {
			t.Errorf("%s loaded", tj)
		}
	}
}
