package config

import "fmt"

// Where a request's sticky-session id is read by default.
const (
	DefaultSessionHeader    = "x-session-id"
	DefaultSessionBodyField = "session_id"
)

// validateSessions checks the session-id sources (the table's own bounds
// are checked by actors.Config.Validate).
func (c *Config) validateSessions() []error {
	var errs []error
	if !validHeaderName(c.SessionHeader) {
		errs = append(errs, fmt.Errorf("session-header %q is not an HTTP header name (letters, digits, '-')", c.SessionHeader))
	}
	if len(c.SessionBodyField) > 128 {
		errs = append(errs, fmt.Errorf("session-body-field is %d bytes long; at most 128", len(c.SessionBodyField)))
	}
	return errs
}

// validHeaderName accepts "" (not read) or letters, digits and '-'.
func validHeaderName(h string) bool {
	for _, r := range h {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return len(h) <= 128
}
