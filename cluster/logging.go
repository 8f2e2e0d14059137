package cluster

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/loglimit"
)

// slogWriter turns memberlist's "[LEVEL] memberlist: message" lines into
// slog records at the matching level, and counts the refutations they
// report (detector.go) whatever the log level.
//
// A warning or error about one inbound message (memberlist ends those
// lines with "from=<address>": an undecryptable packet, a wrong label, a
// message that does not decode) is something anyone who can reach the
// gossip port can cause at will, one line per packet. Those are counted
// (Stats.RejectedMessages) and logged at most once per
// rejectedLogInterval with how many were suppressed, so a flood of
// garbage cannot flood the log.
type slogWriter struct {
	logger   *slog.Logger
	stats    *counters // nil: nothing counted
	rejected *loglimit.Limiter
}

// rejectedLogInterval paces the log lines about rejected inbound messages.
const rejectedLogInterval = 10 * time.Second

func newMemberlistLogger(l *slog.Logger, stats *counters) *log.Logger {
	w := slogWriter{logger: l.With("component", "memberlist"), stats: stats,
		rejected: &loglimit.Limiter{Every: rejectedLogInterval}}
	return log.New(w, "", 0)
}

func (w slogWriter) Write(p []byte) (int, error) {
	level, msg := parseMemberlistLine(p)
	if w.stats != nil && isRefutation(msg) {
		w.stats.refutations.Add(1)
	}
	if w.stats != nil && isKeyMismatch(msg) {
		w.stats.keyMismatch(time.Now())
	}
	if !w.logger.Enabled(context.Background(), level) && level < slog.LevelWarn {
		return len(p), nil
	}
	if level >= slog.LevelWarn && isAboutInboundMessage(msg) {
		if w.stats != nil {
			w.stats.rejectedMessages.Add(1)
		}
		ok, suppressed := w.rejected.Allow(time.Now())
		if ok && w.logger.Enabled(context.Background(), level) {
			w.logger.Log(context.Background(), level, msg, "similar_suppressed", suppressed)
		}
		return len(p), nil
	}
	if w.logger.Enabled(context.Background(), level) {
		w.logger.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// isAboutInboundMessage reports whether memberlist's line is about one
// message a remote sent (memberlist's LogAddress/LogConn suffix).
func isAboutInboundMessage(msg string) bool { return strings.Contains(msg, " from=") }

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
