package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var openAIBodies = []string{
	`{}`,
	` { } `,
	`{"prompt":[1,2,3],"max_tokens":16}`,
	`{"prompt": [1, 2, 3] , "model" : "m"}`,
	`{"prompt":[[1,2,3]]}`,
	`{"prompt":[]}`,
	`{"prompt":[-1,2]}`,
	`{"prompt":[1.5]}`,
	`{"prompt":[1,2,]}`,
	`{"prompt":[01]}`,
	`{"prompt":[1,2]`,
	`{"prompt":"héllo \"world\" \u00e9 \n","model":"m"}`,
	`{"prompt":"bad \x escape"}`,
	`{"prompt":"bad \u12g4"}`,
	"{\"prompt\":\"control \x01 byte\"}",
	"{\"prompt\":\"raw \xff byte\"}",
	`{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"messages":[{"role":"user","content":"hi"],"x":1}`,
	`{"a":tru}`,
	`{"a":true,"b":false,"c":null,"d":-1.5e+3,"e":0}`,
	`{"a":01}`,
	`{"a":1.}`,
	`{"a":1,}`,
	`{,"a":1}`,
	`{"a" 1}`,
	`{"a":1} x`,
	`{"a":1}{}`,
	`{"a":1,"a":2}`,
	`{"prompt":[1],"prompt":"text"}`,
	`{"prompt":"text","prompt":[4,5]}`,
	`{"k\u0065y":1,"\"q\"":2}`,
	"{\"k\xffey\":1}",
	`null`,
	`[]`,
	`"s"`,
	``,
	`{`,
	`{"a":[1,[2,{"b":"]"}]]}`,
	`{"a":{"b":[1,2,}}`,
	`{"a":"\ud800"}`,
}

// TestReadOpenAIBodyAgreesWithEncodingJSON: the one-pass reader accepts
// exactly the bodies encoding/json accepts, with the same members, and
// parses a flat token-id prompt as TokenIDs does.
func TestReadOpenAIBodyAgreesWithEncodingJSON(t *testing.T) {
	for _, body := range openAIBodies {
		t.Run(body, func(t *testing.T) { checkOpenAIBody(t, []byte(body)) })
	}
}

func checkOpenAIBody(t *testing.T, body []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	wantErr := json.Unmarshal(body, &want)
	got, err := readOpenAIBody(body)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: error %v, encoding/json %v", body, err, wantErr)
	}
	if err != nil {
		if err.Error() != wantErr.Error() {
			t.Fatalf("%q: error %q, encoding/json %q", body, err, wantErr)
		}
		return
	}
	if (got.fields == nil) != (want == nil) || len(got.fields) != len(want) {
		t.Fatalf("%q: fields %q, encoding/json %q", body, got.fields, want)
	}
	for k, v := range want {
		if !bytes.Equal(got.fields[k], v) {
			t.Fatalf("%q: %s = %s, encoding/json %s", body, k, got.fields[k], v)
		}
	}
	var ids TokenIDs
	flat := want["prompt"] != nil && ids.UnmarshalJSON(want["prompt"]) == nil
	if flat != (got.promptIDs != nil) {
		t.Fatalf("%q: prompt parsed %v, want %v", body, got.promptIDs != nil, flat)
	}
	if flat && !reflect.DeepEqual([]uint32(*got.promptIDs), []uint32(ids)) {
		t.Fatalf("%q: prompt ids %v, want %v", body, *got.promptIDs, ids)
	}
}

func FuzzReadOpenAIBody(f *testing.F) {
	for _, b := range openAIBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkOpenAIBody(t, body) })
}

// TestOpenAITextInput: the text input is decoded from the members as
// encoding/json decodes the whole body, but for keys spelled otherwise
// than the engine spells them; a member of the wrong type is a malformed
// body naming it.
func TestOpenAITextInput(t *testing.T) {
	for _, tc := range []struct {
		body, err string
	}{
		{body: `{"model":"m","prompt":"p","add_special_tokens":false,"reasoning_effort":"low","chat_template_kwargs":{"a":1}}`},
		{body: `{"messages":[{"role":"user","content":"x"}],"tools":[],"documents":null,"add_generation_prompt":null,"continue_final_message":true,"chat_template":"t"}`},
		{body: `{"model":5}`, err: `malformed JSON: field "model": got JSON number, want string`},
		{body: `{"add_generation_prompt":"yes"}`, err: `malformed JSON: field "add_generation_prompt": got JSON string, want bool`},
		{body: `{"reasoning_effort":[]}`, err: `malformed JSON: field "reasoning_effort": got JSON array, want string`},
	} {
		b, err := readOpenAIBody([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		in, err := b.textInput()
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %s", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		var want textInput
		if err := json.Unmarshal([]byte(tc.body), &want); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", derefInput(*in)) != fmt.Sprintf("%+v", derefInput(want)) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.body, derefInput(*in), derefInput(want))
		}
	}
	b, err := readOpenAIBody([]byte(`{"Model":"m","prompt":"p"}`))
	if err != nil {
		t.Fatal(err)
	}
	if in, err := b.textInput(); err != nil || in.Model != "" {
		t.Errorf("Model read as model: %q, %v", in.Model, err)
	}
}

// derefInput prints a textInput's pointers as their values.
func derefInput(in textInput) string {
	show := func(p any) string {
		v := reflect.ValueOf(p)
		if v.IsNil() {
			return "nil"
		}
		return fmt.Sprint(v.Elem().Interface())
	}
	return strings.Join([]string{in.Model, string(in.Prompt), string(in.Messages), string(in.Tools), string(in.Documents),
		in.ChatTemplate, string(in.ChatTemplateKwargs), show(in.AddGenerationPrompt), show(in.AddSpecialTokens),
		show(in.ContinueFinalMessage), show(in.ReasoningEffort)}, "|")
}
