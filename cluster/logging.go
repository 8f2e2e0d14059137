package cluster

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// slogWriter turns memberlist's "[LEVEL] memberlist: message" lines into
// slog records at the matching level, and counts the refutations they
// report (detector.go) whatever the log level.
type slogWriter struct {
	logger *slog.Logger
	stats  *counters // nil: nothing counted
}

func newMemberlistLogger(l *slog.Logger, stats *counters) *log.Logger {
	return log.New(slogWriter{logger: l.With("component", "memberlist"), stats: stats}, "", 0)
}

func (w slogWriter) Write(p []byte) (int, error) {
	level, msg := parseMemberlistLine(p)
	if w.stats != nil && isRefutation(msg) {
		w.stats.refutations.Add(1)
	}
	if w.logger.Enabled(context.Background(), level) {
		w.logger.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

// parseMemberlistLine extracts the level and the message; lines without a
// known prefix are logged at Info.
func parseMemberlistLine(p []byte) (slog.Level, string) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := bytes.CutPrefix(line, []byte(l.prefix)); ok {
			level, line = l.level, bytes.TrimSpace(rest)
			break
		}
	}
	line, _ = bytes.CutPrefix(line, []byte("memberlist: "))
	if level > slog.LevelDebug && bytes.Contains(line, []byte("use of closed network connection")) {
		// memberlist's own goroutines race its Shutdown and report the
		// closed socket as an error; it is the expected end of a node.
		level = slog.LevelDebug
	}
	return level, string(line)
}
