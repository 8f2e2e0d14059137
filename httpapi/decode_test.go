package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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

// The fast path must decode exactly what encoding/json decodes with
// DisallowUnknownFields, and reject what it rejects (an unknown key
// included): the hand-lifted token_ids is no way around the strict check.
func FuzzRouteBodyFastPath(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"a","token_ids":[1,2,3],"lora_name":"x"}`,
		`{"token_ids":[1],"pinned_worker":{"worker_id":1,"dp_rank":2},"router_config_override":{"router_temperature":0.5}}`,
		`{"a":"]\"token_ids\"","token_ids":[5]}`, `{"nested":{"token_ids":[9]},"token_ids":[1]}`,
		`{"token_ids":"x"}`, `{"token_ids":[1,]}`, `{"token_ids":[1]`, `{} `, `[]`, `{"token_ids":[1]}x`,
		`{"token_ids":[1],"bogus":2}`, `{"bogus":2,"token_ids":[1]}`, `{"token_ids":[1],"pinned_worker":{"worker_id":1,"rank":2}}`,
		`{"token_ids":[1],"router_config_override":{"temperature":0.5}}`, `{"token_ids":[1]} {}`, `{"token_ids":[1]}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast RouteBody
		fastErr := unmarshalWithTokens(data, &fast, &fast.TokenIDs, "")
		var ref RouteBody
		refErr := strictReference(data, &ref)
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

// strictReference is encoding/json refusing unknown fields and anything
// after the value.
func strictReference(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the value")
	}
	return nil
}

func TestUnmarshalStrict(t *testing.T) {
	tests := []struct {
		body, extra string
		want        string // "" = accepted; else a substring of the error
		ids         int    // token ids decoded when accepted
	}{
		{`{"request_id":"a","token_ids":[1,2]}`, "", "", 2},
		{`{"request_id":"a","token_ids":[1,2],"bogus":1}`, "", `unknown field "bogus"`, 0},
		{`{"bogus":{"token_ids":[3]},"token_ids":[1,2]}`, "", `unknown field "bogus"`, 0},
		{`{"token_ids":[1],"pinned_worker":{"worker_id":1,"rank":0}}`, "", `unknown field "rank"`, 0},
		{`{"token_ids":[1],"router_config_override":{"temprature":0.1}}`, "", `unknown field "temprature"`, 0},
		{`{"prompt":"hi","max_tokens":3}`, "", `unknown field "max_tokens"`, 0},
		{`{"token_ids":[1],"session_id":"s"}`, "", `unknown field "session_id"`, 0},
		{`{"token_ids":[1],"session_id":"s"}`, "session_id", "", 1},
		{`{"session_id":"s","token_ids":[1,2,3]}`, "session_id", "", 3},
		{`{"session_id":"s"}`, "session_id", "", 0},
		{`{"session_id":"s","session_id":"t"}`, "session_id", `unknown field "session_id"`, 0},
		{`{"token_ids":[1],"session_id":"s","bogus":1}`, "session_id", `unknown field "bogus"`, 0},
		{`{"token_ids":[1]}{}`, "", "data after the object", 0},
		{`{"token_ids":[1]} x`, "", "data after the object", 0},
		{`{"token_ids":[1]}  `, "", "", 1},
		{`{"token_ids":[1],}`, "", "invalid character", 0},
		{`{"Token_IDs":[1,2]}`, "", `unknown field "Token_IDs"`, 0},
		{`{"token_ids":[1],"REQUEST_ID":"a"}`, "", `unknown field "REQUEST_ID"`, 0},
		{`{"token_ids":[1],"pinned_worker":{"Worker_Id":1}}`, "", `unknown field "Worker_Id"`, 0},
		{`{"token_ids":[1],"router_config_override":{"Router_Temperature":0.5}}`, "", `unknown field "Router_Temperature"`, 0},
		{`{"token_ids":[1],"Session_ID":"s"}`, "session_id", `unknown field "Session_ID"`, 0},
		{`{"token_ids":[1],"pinned_worker":{"worker_id":1,"dp_rank":2},"router_config_override":{"router_temperature":0.5},"messages":null,"model":"m"}`, "", "", 1},
		{`{"request_\u0069d":"a","token_ids":[1]}`, "", "", 1},
	}
	for _, tt := range tests {
		var body RouteBody
		err := unmarshalWithTokens([]byte(tt.body), &body, &body.TokenIDs, tt.extra)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s (extra %q): %v", tt.body, tt.extra, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s (extra %q): error %v, want %q", tt.body, tt.extra, err, tt.want)
		case tt.want == "" && tt.ids > 0 && (body.TokenIDs == nil || len(*body.TokenIDs) != tt.ids):
			t.Errorf("%s: token ids %v, want %d", tt.body, body.TokenIDs, tt.ids)
		}
	}
}

func TestDropTopLevelMember(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"s":1}`, `{}`},
		{`{"s":1,"a":2}`, `{"a":2}`},
		{`{"a":2,"s":1}`, `{"a":2}`},
		{`{"a":2, "s":[1,{"s":2}] ,"b":3}`, `{"a":2, "b":3}`},
		{`{"a":"s","b":{"s":1}}`, ``}, // absent at the top level
		{`{"a":1`, ``},
		{`[1]`, ``},
	}
	for _, tt := range tests {
		got, ok := dropTopLevelMember([]byte(tt.in), "s")
		if tt.want == "" {
			if ok {
				t.Errorf("%s: dropped to %s, want not found", tt.in, got)
			}
			continue
		}
		if !ok || string(got) != tt.want {
			t.Errorf("%s: %s %v, want %s", tt.in, got, ok, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: result %s is not JSON", tt.in, got)
		}
	}
}

// FuzzDropTopLevelMember: on a valid object the result is a valid object
// with the same members but the dropped one.
func FuzzDropTopLevelMember(f *testing.F) {
	for _, s := range []string{`{"s":1}`, `{"a":2,"s":"x"}`, `{"s":{"s":1},"b":[2]}`, `{ "a" : 1 , "s" : null }`, `{"a":"\"s\"","s":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, ok := dropTopLevelMember(data, "s")
		if !ok || !json.Valid(data) {
			return
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(data, &before) != nil {
			return
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("%q -> %q: %v", data, out, err)
		}
		if _, has := before["s"]; !has {
			t.Fatalf("%q: dropped a member that is not there", data)
		}
		delete(before, "s")
		delete(after, "s") // a duplicate "s" stays
		if len(before) != len(after) {
			t.Fatalf("%q -> %q: members %d, want %d", data, out, len(after), len(before))
		}
	})
}
