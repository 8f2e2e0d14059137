package tokenizer

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// A matcher returns the end of the match of its pattern that starts at
// s[i], or -1. Split patterns are used like a regex search: the first
// position at which the pattern matches starts the next match, and what
// lies between matches is kept as its own piece.
//
// The patterns of the tokenizers in use (GPT-2, Llama-3 / cl100k, Qwen2/3,
// o200k / gpt-oss, DeepSeek-V3) need lookahead and backtracking, which Go's
// regexp cannot express. Each has a hand-written matcher below that
// reproduces, alternative by alternative, what a backtracking engine
// returns (ECMAScript semantics, which is what the reference
// implementation runs; FuzzSplitters checks them against regexp2). Any
// other pattern runs on regexp2.
type matcher func(s string, i int) int

// The patterns, exactly as they appear in tokenizer.json.
const (
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Llama-3 (cl100k_base) and Qwen2/3 (single digits).
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// o200k_base (gpt-oss, GPT-4o).
	patO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek-V3's three splits.
	patDigits3   = `\p{N}{1,3}`
	patDeepSeekK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDeepSeek  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// handWritten maps a known pattern to its matcher.
var handWritten = map[string]matcher{
	patGPT2:      matchGPT2,
	patLlama3:    func(s string, i int) int { return matchCL100k(s, i, 3) },
	patQwen:      func(s string, i int) int { return matchCL100k(s, i, 1) },
	patO200k:     matchO200k,
	patDigits3:   func(s string, i int) int { return matchDigits(s, i, 3) },
	patDeepSeekK: matchKana,
	patDeepSeek:  matchDeepSeek,
}

// splitter calls emit with every match of a pattern in s and every gap
// between matches, in order, and stops (returning false) as soon as emit
// returns false.
type splitter func(s string, emit func(piece string, isMatch bool) bool) bool

// compilePattern returns the splitter of a split regex: hand-written when
// the pattern is known, else regexp2.
func compilePattern(pattern string) (splitter, bool, error) {
	if m, ok := handWritten[pattern]; ok {
		return func(s string, emit func(string, bool) bool) bool { return splitWith(m, s, emit) }, true, nil
	}
	sp, err := regexp2Splitter(pattern)
	return sp, false, err
}

// regexp2Splitter runs a pattern on regexp2 (the syntax Go's regexp
// lacks: lookahead, backreferences). Its \s and \p classes are .NET's,
// which can differ from the reference's for a few characters.
func regexp2Splitter(pattern string) (splitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("split pattern %q: %w", pattern, err)
	}
	re.MatchTimeout = 5 * time.Second
	return func(s string, emit func(string, bool) bool) bool {
		rs := []rune(s)
		// byte offset of every rune index
		off := make([]int, len(rs)+1)
		b := 0
		for i, r := range rs {
			off[i] = b
			b += utf8.RuneLen(r)
		}
		off[len(rs)] = b
		gap := 0
		m, err := re.FindRunesMatch(rs)
		for err == nil && m != nil {
			if m.Length > 0 {
				start, end := off[m.Index], off[m.Index+m.Length]
				if gap < start && !emit(s[gap:start], false) {
					return false
				}
				if !emit(s[start:end], true) {
					return false
				}
				gap = end
			}
			m, err = re.FindNextMatch(m)
		}
		return gap >= len(s) || emit(s[gap:], false)
	}, nil
}

// splitWith splits s with a hand-written matcher.
func splitWith(m matcher, s string, emit func(piece string, isMatch bool) bool) bool {
	gap := 0
	for i := 0; i < len(s); {
		if e := m(s, i); e > i {
			if gap < i && !emit(s[gap:i], false) {
				return false
			}
			if !emit(s[i:e], true) {
				return false
			}
			i, gap = e, e
			continue
		}
		if s[i] < 0x80 {
			i++
		} else {
			_, n := decode(s, i)
			i += n
		}
	}
	return gap >= len(s) || emit(s[gap:], false)
}

// ---- shared pieces ----

// contraction matches ECMAScript's rewrite of (?i:'s|'t|'re|'ve|'m|'ll|'d)
// at s[i] == '\”: ASCII letters of either case only.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' || i+1 >= len(s) {
		return -1
	}
	c := s[i+1] | 0x20
	switch c {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	return -1
}

// run returns the end of the longest run from i of runes in want.
func run(s string, i int, want uint16) int {
	for i < len(s) {
		c := s[i]
		if c < 0x80 {
			if asciiClass[c]&want == 0 {
				return i
			}
			i++
			continue
		}
		_, cl, n := runeClass(s, i)
		if cl&want == 0 {
			return i
		}
		i += n
	}
	return i
}

// runNot returns the end of the longest run from i of runes in none of
// the classes of avoid.
func runNot(s string, i int, avoid uint16) int {
	for i < len(s) {
		_, cl, n := runeClass(s, i)
		if cl&avoid != 0 {
			return i
		}
		i += n
	}
	return i
}

// crlf returns the end of the run of \r and \n from i (extra: more bytes
// allowed in the run, e.g. '/').
func crlf(s string, i int, extra byte) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n' || (extra != 0 && s[i] == extra)) {
		i++
	}
	return i
}

// matchDigits matches \p{N}{1,max}.
func matchDigits(s string, i, maxN int) int {
	e := i
	for k := 0; k < maxN && e < len(s); k++ {
		if c := s[e]; c < 0x80 {
			if asciiClass[c]&clsN == 0 {
				break
			}
			e++
			continue
		}
		_, cl, n := runeClass(s, e)
		if cl&clsN == 0 {
			break
		}
		e += n
	}
	if e == i {
		return -1
	}
	return e
}

// matchSpaces matches \s*[\r\n]+|\s+(?!\S)|\s+ at i (the three whitespace
// alternatives every pattern here ends with).
func matchSpaces(s string, i int) int {
	end, lastNL, lastStart := i, -1, i
	for end < len(s) {
		r, cl, n := runeClass(s, end)
		if cl&clsSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		lastStart = end
		end += n
	}
	if end == i {
		return -1
	}
	if lastNL >= 0 { // \s*[\r\n]+: up to the last line break of the run
		return lastNL + 1
	}
	if end == len(s) { // \s+(?!\S) at the end of the text
		return end
	}
	if lastStart > i { // \s+(?!\S): all but the last space before a non-space
		return lastStart
	}
	return end // \s+
}

// optPrefix reports whether the rune at i can be the optional leading
// [^\r\n\p{L}\p{N}] and its size.
func optPrefix(s string, i int) (bool, int) {
	r, cl, n := runeClass(s, i)
	return r != '\r' && r != '\n' && cl&(clsL|clsN) == 0, n
}

// ---- GPT-2 ----

// matchGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions are case-sensitive here).
func matchGPT2(s string, i int) int {
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		j = i + 1
	}
	if j < len(s) {
		_, cl, _ := runeClass(s, j)
		switch {
		case cl&clsL != 0:
			return run(s, j, clsL)
		case cl&clsN != 0:
			return run(s, j, clsN)
		case cl&clsSpace == 0:
			return runNot(s, j, clsSpace|clsL|clsN)
		}
	}
	// " " followed by whitespace (or alone): only the space alternatives.
	end, lastStart := i, i
	for end < len(s) {
		_, cl, n := runeClass(s, end)
		if cl&clsSpace == 0 {
			break
		}
		lastStart = end
		end += n
	}
	if end == i {
		return -1
	}
	if end < len(s) && lastStart > i {
		return lastStart
	}
	return end
}

// ---- Llama-3 / Qwen ----

// matchCL100k: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,d}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func matchCL100k(s string, i, digits int) int {
	if c := s[i]; c < 0x80 && asciiClass[c]&clsN != 0 {
		// A digit starts no contraction and no letters (it is not the
		// optional [^\r\n\p{L}\p{N}]): \p{N}{1,d}.
		if digits == 1 {
			return i + 1
		}
		return matchDigits(s, i, digits)
	}
	if s[i] == '\'' {
		if e := contraction(s, i); e > 0 {
			return e
		}
	}
	r, cl, n := runeClass(s, i)
	if cl&clsL != 0 {
		return run(s, i+n, clsL)
	}
	if r != '\r' && r != '\n' && cl&clsN == 0 && i+n < len(s) {
		if _, cl2, n2 := runeClass(s, i+n); cl2&clsL != 0 {
			return run(s, i+n+n2, clsL)
		}
	}
	if cl&clsN != 0 {
		return matchDigits(s, i, digits)
	}
	j := i
	if r == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if _, cl2, _ := runeClass(s, j); cl2&(clsSpace|clsL|clsN) == 0 {
			return crlf(s, runNot(s, j, clsSpace|clsL|clsN), 0)
		}
	}
	return matchSpaces(s, i)
}

// ---- o200k ----

const (
	o200kUpper = clsLu | clsLt | clsLm | clsLo | clsM
	o200kLower = clsLl | clsLm | clsLo | clsM
)

// o200kWord1 matches [U]*[L]+ at i (then the optional contraction):
// greedy U* gives back runes until an L rune follows.
func o200kWord1(s string, i int) int {
	uEnd, lastLower := i, -1 // lastLower: start of the last rune of the U run that is also in L
	for uEnd < len(s) {
		_, cl, n := runeClass(s, uEnd)
		if cl&o200kUpper == 0 {
			break
		}
		if cl&o200kLower != 0 {
			lastLower = uEnd
		}
		uEnd += n
	}
	var e int
	if uEnd < len(s) {
		if _, cl, _ := runeClass(s, uEnd); cl&o200kLower != 0 {
			e = run(s, uEnd, o200kLower)
		}
	}
	if e == 0 {
		if lastLower < 0 {
			return -1
		}
		_, n := decode(s, lastLower)
		e = lastLower + n // the runes after it in the U run are not in L
	}
	if c := contraction(s, e); c > 0 {
		return c
	}
	return e
}

// o200kWord2 matches [U]+[L]* at i (then the optional contraction).
func o200kWord2(s string, i int) int {
	e := run(s, i, o200kUpper)
	if e == i {
		return -1
	}
	e = run(s, e, o200kLower)
	if c := contraction(s, e); c > 0 {
		return c
	}
	return e
}

func matchO200k(s string, i int) int {
	pre, n := optPrefix(s, i)
	for _, word := range [2]func(string, int) int{o200kWord1, o200kWord2} {
		if pre && i+n < len(s) {
			if e := word(s, i+n); e > 0 {
				return e
			}
		}
		if e := word(s, i); e > 0 {
			return e
		}
	}
	_, cl, _ := runeClass(s, i)
	if cl&clsN != 0 {
		return matchDigits(s, i, 3)
	}
	j := i
	if s[i] == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if _, cl2, _ := runeClass(s, j); cl2&(clsSpace|clsL|clsN) == 0 {
			return crlf(s, runNot(s, j, clsSpace|clsL|clsN), '/')
		}
	}
	return matchSpaces(s, i)
}

// ---- DeepSeek-V3 ----

// matchKana: [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+
func matchKana(s string, i int) int {
	e := i
	for e < len(s) {
		r, n := decode(s, e)
		if !(r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x30ff) {
			break
		}
		e += n
	}
	if e == i {
		return -1
	}
	return e
}

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// matchDeepSeek: [ASCII punctuation][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func matchDeepSeek(s string, i int) int {
	if c := s[i]; c < 0x80 && asciiClass[c]&clsN != 0 {
		// A digit is no punctuation, symbol or space: it can only be
		// the optional [^\r\n\p{L}\p{P}\p{S}] before [\p{L}\p{M}]+.
		if e := run(s, i+1, clsL|clsM); e > i+1 {
			return e
		}
		return -1
	}
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		e := i + 1
		for e < len(s) && isASCIILetter(s[e]) {
			e++
		}
		return e
	}
	r, cl, n := runeClass(s, i)
	if r != '\r' && r != '\n' && cl&(clsL|clsP|clsS) == 0 && i+n < len(s) {
		if e := run(s, i+n, clsL|clsM); e > i+n {
			return e
		}
	}
	if cl&(clsL|clsM) != 0 {
		return run(s, i, clsL|clsM)
	}
	j := i
	if r == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if e := run(s, j, clsP|clsS); e > j {
			return crlf(s, e, 0)
		}
	}
	return matchSpaces(s, i)
}
