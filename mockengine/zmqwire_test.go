package mockengine

import (
	"errors"
	"testing"
)

func TestParseZMQWire(t *testing.T) {
	good := map[string]ZMQWire{
		"":                          {},
		"lora=sql":                  {LoRAName: "sql", LoRAID: 1},
		"lora=sql:7,unknown=Future": {LoRAName: "sql", LoRAID: 7, UnknownEventType: "Future"},
		"lora-id=3":                 {LoRAIDOnly: true, LoRAID: 3},
		"eagle, sglang-pages":       {EAGLEPairs: true, SGLangPages: true},
		"short-page=2,block-size=8": {SGLangPages: true, ShortPageTokens: 2, BlockSize: 8},
	}
	for in, want := range good {
		got, err := ParseZMQWire(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"lora", "lora=", "eagle=1", "short-page=x", "block-size=-1", "bogus", "lora-id=a"} {
		if _, err := ParseZMQWire(in); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%q: %v, want ErrInvalidConfig", in, err)
		}
	}
	for _, w := range []ZMQWire{{ShortPageTokens: 4}, {LoRAName: "a", LoRAIDOnly: true}} {
		if err := w.validate(4); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", w, err)
		}
	}
}
