package httpapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestTokenIDs(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint32
		wantErr string
	}{
		{`[]`, []uint32{}, ""},
		{`[1,2,3]`, []uint32{1, 2, 3}, ""},
		{` [ 0 , 4294967295 ] `, []uint32{0, 4294967295}, ""},
		{"[1,\n2]", []uint32{1, 2}, ""},
		{`null`, nil, ""},
		{`[4294967296]`, nil, "token_ids[0]: value does not fit in uint32"},
		{`[1,-2]`, nil, "token_ids[1]: want a non-negative integer"},
		{`[1.5]`, nil, "token_ids[0]: want a non-negative integer"},
		{`[1,]`, nil, "trailing comma"},
		{`["a"]`, nil, "token_ids[0]"},
		{`{"a":1}`, nil, "must be an array"},
		{`[1 2]`, nil, "token_ids[0]"},
		{`[,1]`, nil, "token_ids[0]: want a non-negative integer"},
		{`[1,,2]`, nil, "token_ids[1]: want a non-negative integer"},
		{`[5,007]`, nil, "token_ids[1]: want a non-negative integer"},
		{`[1x]`, nil, "token_ids[0]: want a non-negative integer"},
		{`[12345678901]`, nil, "token_ids[0]: value does not fit in uint32"},
		{`[1,99999999999999999999999]`, nil, "token_ids[1]: value does not fit in uint32"}, // wraps uint64
		{`[0,10,4294967295]`, []uint32{0, 10, 4294967295}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got TokenIDs
			err := got.UnmarshalJSON([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v want %v", got, tt.want)
			}
		})
	}
}

// The decoder must agree with encoding/json on every valid token array
// and never panic on anything else.
func FuzzTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[]`, `[4294967295]`, `[-1]`, `[1e3]`, `[1,,2]`, `[`, `]`, `null`, `[ 7 ]`,
		`[1234567,12,1, 99999, 0,4294967295,12345678,5 ,6,  7,8]`, `[100000, 2, 33, 444, 5555, 66666, 777777, 8888888, 9]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast TokenIDs
		fastErr := fast.UnmarshalJSON(data)
		var ref []uint32
		refErr := json.Unmarshal(data, &ref)
		if fastErr == nil && refErr != nil {
			t.Fatalf("accepted %q that encoding/json rejects: %v", data, refErr)
		}
		if fastErr == nil && refErr == nil && !slices.Equal([]uint32(fast), ref) {
			t.Fatalf("%q: got %v, encoding/json %v", data, fast, ref)
		}
	})
}

// The fast path must decode exactly what encoding/json decodes, and
// reject what it rejects.
func FuzzRouteBodyFastPath(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"a","token_ids":[1,2,3],"lora_name":"x"}`,
		`{"token_ids":[1],"pinned_worker":{"worker_id":1,"dp_rank":2},"router_config_override":{"router_temperature":0.5}}`,
		`{"a":"]\"token_ids\"","token_ids":[5]}`, `{"nested":{"token_ids":[9]},"token_ids":[1]}`,
		`{"token_ids":"x"}`, `{"token_ids":[1,]}`, `{"token_ids":[1]`, `{} `, `[]`, `{"token_ids":[1]}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast RouteBody
		fastErr := unmarshalWithTokens(data, &fast, &fast.TokenIDs)
		var ref RouteBody
		refErr := json.Unmarshal(data, &ref)
		if fastErr == nil && refErr != nil {
			t.Fatalf("fast path accepted %q; encoding/json: %v", data, refErr)
		}
		if refErr == nil && fastErr == nil {
			a, _ := json.Marshal(fast)
			b, _ := json.Marshal(ref)
			if string(a) != string(b) {
				t.Fatalf("%q: fast %s, encoding/json %s", data, a, b)
			}
		}
	})
}
