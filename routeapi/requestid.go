package routeapi

import (
	"fmt"
	"unicode/utf8"
)

// CheckRequestIDText refuses a request id no client should be able to
// store, whichever API it came by: invalid UTF-8 (and U+FFFD, which a
// JSON decoder puts in its place), control characters (C0 with NUL, DEL,
// C1) and the Unicode bidirectional controls, which make logs, traces and
// dashboards show a different id than the one stored (U+202E reverses the
// text after it). Every replica keeps and gossips the id while the
// request is active.
func CheckRequestIDText(id string) error {
	for i := 0; i < len(id); {
		c := id[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < 0x80 {
			return fmt.Errorf("request_id: control character %U at byte %d", rune(c), i)
		}
		r, n := utf8.DecodeRuneInString(id[i:])
		switch {
		case r == utf8.RuneError:
			return fmt.Errorf("request_id: not UTF-8 (or U+FFFD) at byte %d", i)
		case r >= 0x80 && r <= 0x9f:
			return fmt.Errorf("request_id: control character %U at byte %d", r, i)
		case bidiControl(r):
			return fmt.Errorf("request_id: bidirectional control %U at byte %d", r, i)
		}
		i += n
	}
	return nil
}

// bidiControl reports the Unicode bidirectional formatting characters:
// ALM, LRM, RLM, the embeddings and overrides (LRE..RLO) and the isolates
// (LRI..PDI).
func bidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
