package mockengine

import (
	"fmt"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// ChatMismatch makes the mock engine tokenize chats differently from a
// router that renders them as the engine should: a deliberate
// tokenizer/template mismatch, for testing that a router notices (its
// token counts and predicted cache hits stop matching the engine's
// usage) and recovers (engine-side tokenization through /tokenize, which
// answers with the engine's own, mismatched, rendering).
type ChatMismatch string

const (
	// ChatMismatchNone renders like the engine it imitates (the default).
	ChatMismatchNone ChatMismatch = ""
	// ChatMismatchRawMessages skips the engine's message preprocessing:
	// the template sees the messages and tools as sent (content null
	// stays null, tool-call arguments stay strings), as a router that
	// does not reproduce the engine renders them.
	ChatMismatchRawMessages ChatMismatch = "raw-messages"
	// ChatMismatchTemplate renders with another template
	// (ServerConfig.MismatchTemplate; by default the model's own with
	// MismatchTemplatePrefix before it), as an engine started with
	// --chat-template does while the router reads the model's.
	ChatMismatchTemplate ChatMismatch = "template"
)

// MismatchTemplatePrefix is the text the default mismatched template
// puts before the model's own: a few tokens at the very start, so every
// block hash differs and every token count is off.
const MismatchTemplatePrefix = "[engine-side chat template]\n"

// ParseChatMismatch reads a mismatch mode: "", "none", "raw-messages"
// or "template".
func ParseChatMismatch(s string) (ChatMismatch, error) {
	switch ChatMismatch(s) {
	case "", "none":
		return ChatMismatchNone, nil
	case ChatMismatchRawMessages, ChatMismatchTemplate:
		return ChatMismatch(s), nil
	}
	return "", fmt.Errorf("chat mismatch %q: want none, raw-messages or template", s)
}

// chatFor applies the engine's dialect and its mismatch mode to a chat.
func (s *Server) chatFor(c tokenizer.Chat) tokenizer.Chat {
	c.Dialect = s.cfg.ChatDialect
	switch s.cfg.ChatMismatch {
	case ChatMismatchRawMessages:
		c.Raw = true
	case ChatMismatchTemplate:
		if c.Template == "" {
			c.Template = s.cfg.MismatchTemplate
			if c.Template == "" && s.cfg.Tokenizer != nil {
				c.Template = MismatchTemplatePrefix + s.cfg.Tokenizer.Config.ChatTemplate
			}
		}
	}
	return c
}
