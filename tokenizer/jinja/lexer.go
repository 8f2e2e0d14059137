// Package jinja renders Hugging Face chat templates: the subset of Jinja2
// that chat templates use (if/for/set/macro, loop controls, namespaces,
// filters, tests, Python string/list/dict methods) with the options
// transformers renders them with (trim_blocks, lstrip_blocks, the
// loopcontrols extension) and its extensions (raise_exception,
// strftime_now, tojson). Objects keep their key order, as Python dicts
// do, so a tool schema renders with the client's key order.
//
// Where Python's Jinja2 and @huggingface/jinja (the reference the golden
// tests compare with) differ, this follows @huggingface/jinja: booleans
// render as true/false, none as an empty string, lists and dicts as JSON.
package jinja

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind int

const (
	tText tokKind = iota
	tOpenStmt
	tCloseStmt
	tOpenExpr
	tCloseExpr
	tString
	tNumber
	tName
	tOp
	tEOF
)

type token struct {
	kind tokKind
	val  string
	line int
}

// SyntaxError is a template that cannot be parsed.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("template syntax error (line %d): %s", e.Line, e.Msg)
}

var (
	lstripRe     = regexp.MustCompile(`(?m)^[ \t]*(\{[#%-])`)
	trimRe       = regexp.MustCompile(`([#%-]\})\n`)
	generationRe = regexp.MustCompile(`(?s)(\s*)\{%(-?)\s*(?:end)?generation\s*(-?)%\}(\s*)`)
)

// preprocess applies transformers' environment options the way
// @huggingface/jinja does: one trailing newline dropped, lstrip_blocks,
// trim_blocks, and the {% generation %} tags removed.
func preprocess(src string) string {
	src = strings.TrimSuffix(src, "\n")
	src = lstripRe.ReplaceAllString(src, "$1")
	src = trimRe.ReplaceAllString(src, "$1")
	return generationRe.ReplaceAllStringFunc(src, func(m string) string {
		g := generationRe.FindStringSubmatch(m)
		out := ""
		if g[2] == "" {
			out += g[1]
		}
		if g[3] == "" {
			out += g[4]
		}
		return out
	})
}

func isSpace(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' }

func lex(src string) ([]token, error) {
	src = preprocess(src)
	var toks []token
	line := 1
	i := 0
	inTag := false
	curly := 0
	errf := func(format string, args ...any) error {
		return &SyntaxError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	stripLastText := func() {
		if n := len(toks); n > 0 && toks[n-1].kind == tText {
			toks[n-1].val = strings.TrimRightFunc(toks[n-1].val, isSpace)
			if toks[n-1].val == "" {
				toks = toks[:n-1]
			}
		}
	}
	skipSpace := func() {
		for i < len(src) {
			r, n := rune(src[i]), 1
			if r >= 0x80 {
				r, n = decodeRune(src[i:])
			}
			if !isSpace(r) {
				break
			}
			if r == '\n' {
				line++
			}
			i += n
		}
	}
	for i < len(src) {
		if !inTag {
			j := i
			for j < len(src) && !(src[j] == '{' && j+1 < len(src) && (src[j+1] == '%' || src[j+1] == '{' || src[j+1] == '#')) {
				j++
			}
			if j > i {
				toks = append(toks, token{tText, src[i:j], line})
				line += strings.Count(src[i:j], "\n")
				i = j
				continue
			}
			// a tag opens at i
			switch {
			case strings.HasPrefix(src[i:], "{#"):
				end := strings.Index(src[i+2:], "#}")
				if end < 0 {
					return nil, errf("comment is not closed")
				}
				body := src[i+2 : i+2+end]
				if strings.HasPrefix(body, "-") {
					stripLastText()
				}
				line += strings.Count(body, "\n")
				i += 2 + end + 2
				if strings.HasSuffix(body, "-") {
					skipSpace()
				}
				continue
			}
			if i+2 < len(src) && src[i+2] == '-' {
				stripLastText()
			}
			if src[i+1] == '%' {
				toks = append(toks, token{tOpenStmt, "{%", line})
			} else {
				toks = append(toks, token{tOpenExpr, "{{", line})
				curly = 0
			}
			i += 2
			if i < len(src) && src[i] == '-' {
				i++
			}
			inTag = true
			continue
		}
		skipSpace()
		if i >= len(src) {
			break
		}
		rest := src[i:]
		switch {
		case strings.HasPrefix(rest, "-%}"), strings.HasPrefix(rest, "-}}") && curly == 0:
			kind := tCloseStmt
			if rest[1] == '}' {
				kind = tCloseExpr
			}
			toks = append(toks, token{kind, rest[1:3], line})
			i += 3
			inTag = false
			skipSpace()
			continue
		case strings.HasPrefix(rest, "%}"):
			toks = append(toks, token{tCloseStmt, "%}", line})
			i += 2
			inTag = false
			continue
		case strings.HasPrefix(rest, "}}") && curly == 0:
			toks = append(toks, token{tCloseExpr, "}}", line})
			i += 2
			inTag = false
			continue
		}
		c := rest[0]
		switch {
		case c == '\'' || c == '"':
			s, n, err := lexString(rest)
			if err != nil {
				return nil, errf("%v", err)
			}
			toks = append(toks, token{tString, s, line})
			line += strings.Count(rest[:n], "\n")
			i += n
		case c >= '0' && c <= '9':
			j := 0
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			prevDot := len(toks) > 0 && toks[len(toks)-1].kind == tOp && toks[len(toks)-1].val == "."
			if !prevDot && j+1 < len(rest) && rest[j] == '.' && rest[j+1] >= '0' && rest[j+1] <= '9' {
				j++
				for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
					j++
				}
			}
			// An exponent (1e16, 2.5E-3), as Python Jinja2's float literal.
			if !prevDot && j+1 < len(rest) && (rest[j] == 'e' || rest[j] == 'E') {
				k := j + 1
				if rest[k] == '+' || rest[k] == '-' {
					k++
				}
				if k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
					for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
						k++
					}
					j = k
				}
			}
			toks = append(toks, token{tNumber, rest[:j], line})
			i += j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := 0
			for j < len(rest) && (rest[j] == '_' || rest[j] >= 'a' && rest[j] <= 'z' || rest[j] >= 'A' && rest[j] <= 'Z' || rest[j] >= '0' && rest[j] <= '9') {
				j++
			}
			toks = append(toks, token{tName, rest[:j], line})
			i += j
		default:
			op := ""
			for _, o := range []string{"**", "//", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("()[]{},.:|+-*/%~<>=", rune(c)) {
					return nil, errf("unexpected character %q", c)
				}
				op = rest[:1]
			}
			switch op {
			case "{":
				curly++
			case "}":
				curly--
			}
			toks = append(toks, token{tOp, op, line})
			i += len(op)
		}
	}
	if inTag {
		return nil, errf("tag is not closed")
	}
	toks = append(toks, token{tEOF, "", line})
	return toks, nil
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

// lexString reads a quoted string literal with Python/Jinja escapes.
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c == q {
			return b.String(), i + 1, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			break
		}
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '\'', '"', '\\':
			b.WriteByte(s[i])
		case 'x', 'u':
			n := 2
			if s[i] == 'u' {
				n = 4
			}
			if i+n >= len(s) {
				return "", 0, fmt.Errorf("bad \\%c escape", s[i])
			}
			var v rune
			if _, err := fmt.Sscanf(s[i+1:i+1+n], "%x", &v); err != nil {
				return "", 0, fmt.Errorf("bad \\%c escape", s[i])
			}
			b.WriteRune(v)
			i += n
		default:
			return "", 0, fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return "", 0, fmt.Errorf("string literal is not closed")
}
