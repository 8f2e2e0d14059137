package config

import (
	"strings"
	"testing"
)

func TestChatEngineFlag(t *testing.T) {
	for _, tc := range []struct {
		arg, wantErr string
	}{
		{"--chat-engine=qwen3=sglang", ""},
		{"--chat-engine=qwen3=vllm,llama=sglang", ""},
		{"--chat-engine=qwen3=trtllm", "want vllm or sglang"},
		{"--chat-engine=sglang", "want MODEL=vllm or MODEL=sglang"},
	} {
		cfg, err := Load([]string{tc.arg}, func(string) string { return "" })
		if err == nil {
			err = cfg.Validate()
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.arg, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.arg, err, tc.wantErr)
		}
	}
}
