package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type engineChatGolden struct {
	Generator    string `json:"generator"`
	IDsGenerator string `json:"ids_generator"`
	Cases        []struct {
		Family        string `json:"family"`
		Tokenizer     string `json:"tokenizer"`
		TemplateFile  string `json:"template_file"`
		Dialect       string `json:"dialect"`
		Name          string `json:"name"`
		ContentFormat string `json:"content_format"`
		Request       struct {
			Messages             json.RawMessage `json:"messages"`
			Tools                json.RawMessage `json:"tools"`
			Documents            json.RawMessage `json:"documents"`
			Kwargs               json.RawMessage `json:"chat_template_kwargs"`
			AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
			ContinueFinalMessage bool            `json:"continue_final_message"`
			ReasoningEffort      string          `json:"reasoning_effort"`
		} `json:"request"`
		Rendered *string  `json:"rendered"`
		Error    *string  `json:"error"`
		IDs      []uint32 `json:"ids"`
	} `json:"cases"`
}

// TestGoldenEngineChat renders OpenAI chat requests as vLLM and SGLang
// do (message preprocessing, then the template) and compares the prompt
// with Python Jinja2's render of the engines' rules
// (testdata/gen/chat_golden.py) and its token ids with the reference
// tokenizer's: every request × template must be identical. The "raw"
// cases render the messages as sent (features.jinja and every model's
// template): the conformance of this package's Jinja with Python's.
func TestGoldenEngineChat(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", "chat_engine.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g engineChatGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	families := map[string]bool{}
	renders, refused, tokens := 0, 0, 0
	for _, c := range g.Cases {
		t.Run(c.Family+"/"+c.Dialect+"/"+c.Name, func(t *testing.T) {
			tok := golden(t, c.Tokenizer)
			raw := c.Dialect == "raw"
			dialect, err := ParseDialect(strings.TrimPrefix(c.Dialect, "raw"))
			if err != nil {
				t.Fatal(err)
			}
			chat := Chat{
				Messages: c.Request.Messages, Tools: c.Request.Tools, Documents: c.Request.Documents, Kwargs: c.Request.Kwargs,
				AddGenerationPrompt:  c.Request.AddGenerationPrompt == nil || *c.Request.AddGenerationPrompt,
				ContinueFinalMessage: c.Request.ContinueFinalMessage, ReasoningEffort: c.Request.ReasoningEffort,
				Dialect: dialect, Raw: raw,
			}
			if c.TemplateFile != "" {
				src, err := os.ReadFile(c.TemplateFile)
				if err != nil {
					t.Fatal(err)
				}
				chat.Template = string(src)
			}
			if c.ContentFormat != "" && c.TemplateFile == "" && !raw {
				if got := tok.ContentFormat(dialect); string(got) != c.ContentFormat {
					t.Errorf("content format %s, the engine detects %s", got, c.ContentFormat)
				}
			}
			ids, prompt, err := tok.EncodeChat(chat)
			if c.Error != nil {
				if err == nil {
					t.Fatalf("rendered %q; the engine refuses the request (%s)", prompt, *c.Error)
				}
				var me *MessagesError
				var te *TemplateError
				if !errors.As(err, &me) && !errors.As(err, &te) {
					t.Fatalf("error %v is neither a MessagesError nor a TemplateError", err)
				}
				if msg, ok := strings.CutPrefix(*c.Error, "raised: "); ok && (te == nil || !te.Raised || te.Err.Error() != msg) {
					t.Errorf("error %v, the template raised %q", err, msg)
				}
				refused++
				return
			}
			if err != nil {
				t.Fatalf("render: %v (the engine renders %q)", err, *c.Rendered)
			}
			if prompt != *c.Rendered {
				t.Fatalf("render differs from %s\n got  %q\n want %q", g.Generator, prompt, *c.Rendered)
			}
			if !slices.Equal(ids, c.IDs) {
				t.Fatalf("ids differ: %s", describeDiff(tok, prompt, ids, c.IDs))
			}
			renders++
			tokens += len(ids)
			families[c.Family] = true
		})
	}
	t.Logf("%d requests × templates (%d templates, %d dialects and raw): %d renders with identical text and token ids (%d tokens), %d refused as the engine refuses them; reference %s, ids %s",
		len(g.Cases), len(families), 2, renders, tokens, refused, g.Generator, g.IDsGenerator)
	if renders+refused != len(g.Cases) {
		t.Errorf("%d of %d cases differ", len(g.Cases)-renders-refused, len(g.Cases))
	}
}
