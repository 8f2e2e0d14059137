package httpapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// engineGolden reads the Python Jinja2 renders of the tokenizer package
// (tokenizer/testdata/gen/chat_golden.py) for one template and dialect.
func engineGolden(t *testing.T, family, dialect string) map[string]struct {
	Request json.RawMessage
	IDs     []uint32
	Error   *string
} {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "golden", "chat_engine.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Family, Dialect, Name string
			Request               json.RawMessage
			IDs                   []uint32
			Error                 *string
		}
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	out := map[string]struct {
		Request json.RawMessage
		IDs     []uint32
		Error   *string
	}{}
	for _, c := range g.Cases {
		if c.Family == family && c.Dialect == dialect {
			out[c.Name] = struct {
				Request json.RawMessage
				IDs     []uint32
				Error   *string
			}{c.Request, c.IDs, c.Error}
		}
	}
	return out
}

// The router counts a chat's tokens as the engine does: OpenAI tool-call
// history (content null, arguments as a JSON string, text-part tool
// results), text-part arrays and chat_template_kwargs give the token
// count of Python Jinja2's render of vLLM's rules, on /route; SGLang's
// rules when the model is served with --chat-engine qwen3=sglang.
func TestRouteChatAsEngine(t *testing.T) {
	for _, dialect := range []string{"vllm", "sglang"} {
		t.Run(dialect, func(t *testing.T) {
			models, err := LoadModels(ModelSpec{Served: []string{"qwen3=" + qwen3Dir(t)}, ChatEngines: []string{"qwen3=" + dialect}})
			if err != nil {
				t.Fatal(err)
			}
			g := startModelRig(t, models, 0)
			cases := engineGolden(t, "qwen3", dialect)
			if len(cases) < 5 {
				t.Fatalf("%d golden cases for qwen3/%s", len(cases), dialect)
			}
			refused := 0
			for name, c := range cases {
				var fields map[string]json.RawMessage
				if err := json.Unmarshal(c.Request, &fields); err != nil {
					t.Fatal(err)
				}
				fields["model"] = json.RawMessage(`"qwen3"`)
				fields["update_states"] = json.RawMessage(`false`)
				body, _ := json.Marshal(fields)
				code, out := post(t, g.url+"/route", string(body))
				if c.Error != nil {
					refused++
					if code != 400 {
						t.Errorf("%s: %d %v, the engine refuses it (%s)", name, code, out, *c.Error)
					}
					continue
				}
				if code != 200 || out["prompt_tokens"] != float64(len(c.IDs)) {
					t.Errorf("%s: %d %v, want prompt_tokens %d", name, code, out, len(c.IDs))
				}
			}
			// Every refusal is counted by reason, none silently.
			vec := g.s.opts.Metrics.PromptsRefused
			if n := testutil.ToFloat64(vec.WithLabelValues("messages")) + testutil.ToFloat64(vec.WithLabelValues("template")) +
				testutil.ToFloat64(vec.WithLabelValues("input")); int(n) != refused {
				t.Errorf("kvrouter_prompts_refused_total counts %v chats refused, the golden refuses %d", n, refused)
			}
		})
	}
	if _, err := LoadModels(ModelSpec{Served: []string{"qwen3=" + qwen3Dir(t)}, ChatEngines: []string{"other=sglang"}}); err == nil {
		t.Error("a chat engine for a model that is not served was accepted")
	}
	if _, err := LoadModels(ModelSpec{Served: []string{"qwen3=" + qwen3Dir(t)}, ChatEngines: []string{"qwen3=trtllm"}}); err == nil {
		t.Error("an unknown chat engine was accepted")
	}
}
