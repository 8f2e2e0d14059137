package config

import (
	"fmt"
	"io"
	"log/slog"
)

// The values of --log-format.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// NewLogger builds the replica's logger from --log-level and --log-format:
// log/slog's text handler (key=value lines) or its JSON handler (one
// object per line, for log shippers).
func (c *Config) NewLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("log-level: log level %q: %w", c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.LogFormat {
	case LogFormatText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case LogFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log-format must be %s or %s, got %q", LogFormatText, LogFormatJSON, c.LogFormat)
}

func (c *Config) validateLogging() []error {
	if _, err := c.NewLogger(io.Discard); err != nil {
		return []error{err}
	}
	return nil
}
