package qsp

// The tokenizer (issue 18) on common/tok.gguf (QSP_TOK_GGUF; see
// common/make_tok_gguf.py): byte-level BPE, ids 0..255 are the bytes, 259 is
// "hello", 260 <|bos|> (added), 261 <|eos|>, 262 <|im_end|> (eot), 263
// <think> (user-defined).

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

const (
	tokBOS, tokEOS, tokEOT, tokThink, tokHello = 260, 261, 262, 263, 259
)

func loadTok(t *testing.T) *Tokenizer {
	t.Helper()
	path := os.Getenv("QSP_TOK_GGUF")
	if path == "" {
		t.Skip("QSP_TOK_GGUF is not set (ctest sets it)")
	}
	tok, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tok.Close() })
	return tok
}

func mustTok(t *testing.T, tok *Tokenizer, text string, add, parse bool) []int32 {
	t.Helper()
	ids, err := tok.Tokenize(text, add, parse)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func mustDetok(t *testing.T, tok *Tokenizer, ids []int32, skip bool) string {
	t.Helper()
	s, err := tok.Detokenize(ids, skip)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenizerInfo(t *testing.T) {
	tok := loadTok(t)
	i, err := tok.Info()
	if err != nil {
		t.Fatal(err)
	}
	want := TokenizerInfo{Kind: TokenizerBPE, NVocab: 264, BOS: tokBOS, EOS: tokEOS, EOT: tokEOT, AddBOS: true,
		MaxPieceBytes: i.MaxPieceBytes, Model: "gpt2", Pre: "qwen2", ChatTemplate: "{{ messages }}",
		UnicodeVersion: i.UnicodeVersion}
	if i != want || i.MaxPieceBytes < 10 || i.UnicodeVersion == "" {
		t.Errorf("info %+v", i)
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	tok := loadTok(t)
	for _, text := range []string{"hello world", "héllo € 日本語 🙂", "", "a\nb\tc  d"} {
		ids := mustTok(t, tok, text, false, false)
		if got := mustDetok(t, tok, ids, false); got != text {
			t.Errorf("%q -> %v -> %q", text, ids, got)
		}
	}
	if ids := mustTok(t, tok, "hello", false, false); !reflect.DeepEqual(ids, []int32{tokHello}) {
		t.Errorf("hello: %v", ids)
	}
	if ids := mustTok(t, tok, "hé", false, false); !reflect.DeepEqual(ids, []int32{'h', 0xC3, 0xA9}) {
		t.Errorf("hé: %v", ids)
	}
}

func TestTokenizerSpecial(t *testing.T) {
	tok := loadTok(t)
	if ids := mustTok(t, tok, "hello", true, false); !reflect.DeepEqual(ids, []int32{tokBOS, tokHello}) {
		t.Errorf("add_special: %v", ids)
	}
	text := "<|im_end|><think>x"
	plain := mustTok(t, tok, text, false, false)
	for _, id := range plain {
		if id == tokEOT {
			t.Errorf("EOT parsed without parseSpecial: %v", plain)
		}
	}
	if ids := mustTok(t, tok, text, false, true); !reflect.DeepEqual(ids, []int32{tokEOT, tokThink, 'x'}) {
		t.Errorf("parse_special: %v", ids)
	}
	ids := mustTok(t, tok, text, true, true)
	if got := mustDetok(t, tok, ids, false); got != "<|bos|>"+text {
		t.Errorf("detokenize: %q", got)
	}
	if got := mustDetok(t, tok, ids, true); got != "<think>x" {
		t.Errorf("skip_special: %q", got)
	}
	if p, _ := tok.TokenPiece(tokBOS, false); string(p) != "<|bos|>" {
		t.Errorf("piece: %q", p)
	}
	if p, _ := tok.TokenPiece(tokBOS, true); len(p) != 0 {
		t.Errorf("piece skip: %q", p)
	}
	if p, _ := tok.TokenPiece(0xE2, false); string(p) != "\xe2" {
		t.Errorf("byte piece: %q", p)
	}
	var e *Error
	if _, err := tok.TokenPiece(264, false); !errors.As(err, &e) || e.Status != StatusOutOfRange {
		t.Errorf("piece 264: %v", err)
	}
	if _, err := tok.Detokenize([]int32{1, -1}, false); !errors.As(err, &e) || e.Status != StatusOutOfRange {
		t.Errorf("detokenize -1: %v", err)
	}
}

func TestTokenizerStream(t *testing.T) {
	tok := loadTok(t)
	ids := mustTok(t, tok, "a€b", false, false)
	if !reflect.DeepEqual(ids, []int32{'a', 0xE2, 0x82, 0xAC, 'b'}) {
		t.Fatalf("a€b: %v", ids)
	}
	s, err := tok.NewStream(false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for _, id := range ids {
		p, err := s.Push(id)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if f, _ := s.Flush(); !reflect.DeepEqual(got, []string{"a", "", "", "€", "b"}) || f != "" {
		t.Errorf("pushes %q, flush %q", got, f)
	}
	s.Push(0xE2)
	s.Push(0x82)
	if f, _ := s.Flush(); f != "\xe2\x82" {
		t.Errorf("flush of an unfinished character: %q", f)
	}
	if p, _ := s.Push(tokHello); p != "hello" {
		t.Errorf("after flush: %q", p)
	}
	s.Close()
	if _, err := s.Push(1); err == nil {
		t.Error("push on a closed stream")
	}
}

func TestTokenizerLongText(t *testing.T) {
	tok := loadTok(t)
	text := strings.Repeat("hello wörld € ", 2000)
	ids := mustTok(t, tok, text, true, false)
	if len(ids) <= firstIDs || ids[0] != tokBOS {
		t.Fatalf("%d ids", len(ids))
	}
	if got := mustDetok(t, tok, ids, true); got != text {
		t.Error("long round trip differs")
	}
	s, err := tok.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b strings.Builder
	for _, id := range ids {
		p, _ := s.Push(id)
		b.WriteString(p)
	}
	f, _ := s.Flush()
	if b.String()+f != text {
		t.Error("long stream differs")
	}
}

func TestTokenizerErrors(t *testing.T) {
	tok := loadTok(t)
	s, _ := tok.NewStream(false)
	tok.Close()
	var e *Error
	if _, err := tok.Tokenize("x", true, false); !errors.As(err, &e) {
		t.Errorf("tokenize on a closed tokenizer: %v", err)
	}
	if _, err := s.Push(1); err == nil {
		t.Error("push after the tokenizer closed")
	}
	s.Close()
	model := os.Getenv("QSP_GGUF_MODEL")
	if model == "" {
		t.Skip("QSP_GGUF_MODEL is not set")
	}
	// the synthesized tiny model has tokenizer.ggml.model = "none"
	if _, err := LoadTokenizer(model); !errors.As(err, &e) || e.Status != StatusUnsupported ||
		!strings.Contains(e.Message, "none") {
		t.Errorf("no tokenizer: %v", err)
	}
	if _, err := LoadTokenizer("/nonexistent/model.gguf"); !errors.As(err, &e) || e.Status != StatusIO {
		t.Errorf("missing file: %v", err)
	}
}
