package qsp

// The tokenizer a GGUF file carries (qsp_gguf.h, libqsp >= 1.2).

/*
#include <stdlib.h>
#include <string.h>
#include <qsp/qsp_gguf.h>

// Each wrapper copies qsp_gguf_last_error() in the same call (it is per OS
// thread). BUFFER_TOO_SMALL is not an error to the Go side: no message.
static char* goqsp_tok_dup_error(qsp_status st) {
	return (st == QSP_OK || st == QSP_ERR_BUFFER_TOO_SMALL) ? NULL : strdup(qsp_gguf_last_error());
}

static qsp_status goqsp_tokenizer_create(const qsp_gguf* g, qsp_tokenizer** out, char** msg) {
	qsp_status st = qsp_tokenizer_create(g, out);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_tokenizer_get_info(const qsp_tokenizer* t, qsp_tokenizer_info* info, char** msg) {
	qsp_status st;
	qsp_tokenizer_info_init(info);
	st = qsp_tokenizer_get_info(t, info);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_tokenize(const qsp_tokenizer* t, const char* text, uint64_t n, uint32_t flags,
                                 int32_t* ids, uint64_t cap, uint64_t* n_ids, char** msg) {
	qsp_status st = qsp_tokenize(t, text, n, flags, ids, cap, n_ids);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_token_piece(const qsp_tokenizer* t, int32_t id, uint32_t flags, char* buf, uint64_t cap,
                                    uint64_t* len, char** msg) {
	qsp_status st = qsp_token_piece(t, id, flags, buf, cap, len);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_detokenize(const qsp_tokenizer* t, const int32_t* ids, uint64_t n, uint32_t flags, char* buf,
                                   uint64_t cap, uint64_t* len, char** msg) {
	qsp_status st = qsp_detokenize(t, ids, n, flags, buf, cap, len);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_text_stream_create(const qsp_tokenizer* t, uint32_t flags, qsp_text_stream** out, char** msg) {
	qsp_status st = qsp_text_stream_create(t, flags, out);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_text_stream_push(qsp_text_stream* s, int32_t id, char* buf, uint64_t cap, uint64_t* len,
                                         char** msg) {
	qsp_status st = qsp_text_stream_push(s, id, buf, cap, len);
	*msg = goqsp_tok_dup_error(st);
	return st;
}

static qsp_status goqsp_text_stream_flush(qsp_text_stream* s, char* buf, uint64_t cap, uint64_t* len, char** msg) {
	qsp_status st = qsp_text_stream_flush(s, buf, cap, len);
	*msg = goqsp_tok_dup_error(st);
	return st;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// tokenizerVersion is the first libqsp version with the tokenizer (1.2.0).
const tokenizerVersion = 10200

// Tokenizer kinds (TokenizerInfo.Kind).
const (
	TokenizerBPE = 1 // tokenizer.ggml.model "gpt2": byte-level BPE
	TokenizerSPM = 2 // tokenizer.ggml.model "llama": SentencePiece-style
)

// Initial buffer sizes; a call that needs more is repeated with the length
// the library asks for (its BUFFER_TOO_SMALL protocol).
const (
	firstIDs   = 256
	firstBytes = 1024
)

// TokenizerInfo describes a Tokenizer (qsp_tokenizer_info). Ids are -1 where
// the model has none; strings are "" where the file has none.
type TokenizerInfo struct {
	Kind           int32 // TokenizerBPE, TokenizerSPM
	NVocab         uint32
	BOS, EOS, EOT  int32
	AddBOS, AddEOS bool // what Tokenize adds with addSpecial
	MaxPieceBytes  uint32
	Model          string // tokenizer.ggml.model ("gpt2", "llama")
	Pre            string // tokenizer.ggml.pre ("qwen2", "llama-bpe")
	ChatTemplate   string // tokenizer.chat_template
	UnicodeVersion string
}

// Tokenizer is the tokenizer of a GGUF file: text to token ids and back. It
// copies what it needs from the file, which may be closed afterwards. Close
// it when done; a finalizer frees a forgotten one as a safety net. It may be
// used by many goroutines at once.
type Tokenizer struct {
	mu  sync.RWMutex // read: any use (streams too); write: Close
	ptr *C.qsp_tokenizer
}

var errTokenizerClosed = &Error{StatusInvalidArgument, "the Tokenizer is closed"}

// Tokenizer builds the file's tokenizer (qsp_tokenizer_create). Errors:
// StatusUnsupported (no tokenizer: tokenizer.ggml.model absent or "none"; a
// model or pre-tokenizer qsp lacks; a libqsp older than 1.2),
// StatusBadFormat (a malformed vocabulary).
func (f *ModelFile) Tokenizer() (*Tokenizer, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	if v := uint32(C.qsp_version_number()); v < tokenizerVersion {
		return nil, &Error{StatusUnsupported, fmt.Sprintf(
			"the tokenizer needs libqsp >= 1.2.0 (qsp_tokenizer_create); the loaded library is %s", Version())}
	}
	var ptr *C.qsp_tokenizer
	err := f.use(func(g *C.qsp_gguf) error {
		var msg *C.char
		return takeMessage(C.goqsp_tokenizer_create(g, &ptr, &msg), msg)
	})
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{ptr: ptr}
	runtime.SetFinalizer(t, (*Tokenizer).finalize)
	return t, nil
}

// LoadTokenizer opens the GGUF file at path, builds its tokenizer and closes
// the file.
func LoadTokenizer(path string) (*Tokenizer, error) {
	f, err := OpenModelFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Tokenizer()
}

func (t *Tokenizer) finalize() {
	if t.ptr != nil {
		C.qsp_tokenizer_destroy(t.ptr)
		t.ptr = nil
	}
}

// Close frees the tokenizer; later calls (and its streams' calls) return an
// error. Idempotent.
func (t *Tokenizer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ptr != nil {
		C.qsp_tokenizer_destroy(t.ptr)
		t.ptr = nil
		runtime.SetFinalizer(t, nil)
	}
	return nil
}

func (t *Tokenizer) use(fn func(p *C.qsp_tokenizer) error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return errTokenizerClosed
	}
	err := fn(t.ptr)
	runtime.KeepAlive(t)
	return err
}

// Info describes the tokenizer.
func (t *Tokenizer) Info() (TokenizerInfo, error) {
	var i C.qsp_tokenizer_info
	var out TokenizerInfo
	err := t.use(func(p *C.qsp_tokenizer) error {
		var msg *C.char
		if err := takeMessage(C.goqsp_tokenizer_get_info(p, &i, &msg), msg); err != nil {
			return err
		}
		out = TokenizerInfo{
			Kind: int32(i.kind), NVocab: uint32(i.n_vocab), BOS: int32(i.bos_id), EOS: int32(i.eos_id),
			EOT: int32(i.eot_id), AddBOS: i.add_bos != 0, AddEOS: i.add_eos != 0,
			MaxPieceBytes: uint32(i.max_piece_bytes), Model: C.GoString(i.model), Pre: C.GoString(i.pre),
			ChatTemplate: C.GoString(i.chat_template), UnicodeVersion: C.GoString(i.unicode_version),
		}
		return nil
	})
	return out, err
}

// sizedText runs call with the size-query protocol: a buffer of first bytes,
// then one of the length the library asks for.
func sizedText(first int, call func(buf *C.char, capacity C.uint64_t, n *C.uint64_t, msg **C.char) C.qsp_status) ([]byte, error) {
	buf := make([]byte, first+1)
	for {
		var n C.uint64_t
		var msg *C.char
		st := call((*C.char)(unsafe.Pointer(&buf[0])), C.uint64_t(len(buf)-1), &n, &msg)
		if st == C.QSP_ERR_BUFFER_TOO_SMALL && int(n) > len(buf)-1 {
			buf = make([]byte, int(n)+1)
			continue
		}
		if err := takeMessage(st, msg); err != nil {
			return nil, err
		}
		return buf[:int(n):int(n)], nil
	}
}

// Tokenize returns the token ids of text (UTF-8; invalid sequences are
// tokenized as U+FFFD). addSpecial adds BOS / EOS as the model does;
// parseSpecial makes text spelling a control token ("<|im_end|>") that token.
func (t *Tokenizer) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var flags C.uint32_t
	if addSpecial {
		flags |= C.QSP_TOKENIZE_ADD_SPECIAL
	}
	if parseSpecial {
		flags |= C.QSP_TOKENIZE_PARSE_SPECIAL
	}
	b := []byte(text)
	var cText *C.char
	if len(b) > 0 {
		cText = (*C.char)(unsafe.Pointer(&b[0]))
	}
	var ids []int32
	err := t.use(func(p *C.qsp_tokenizer) error {
		ids = make([]int32, firstIDs)
		for {
			var n C.uint64_t
			var msg *C.char
			st := C.goqsp_tokenize(p, cText, C.uint64_t(len(b)), flags, (*C.int32_t)(unsafe.Pointer(&ids[0])),
				C.uint64_t(len(ids)), &n, &msg)
			if st == C.QSP_ERR_BUFFER_TOO_SMALL && int(n) > len(ids) {
				ids = make([]int32, int(n))
				continue
			}
			if err := takeMessage(st, msg); err != nil {
				return err
			}
			ids = ids[:int(n):int(n)]
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

func detokFlags(skipSpecial bool) C.uint32_t {
	if skipSpecial {
		return C.QSP_DETOKENIZE_SKIP_SPECIAL
	}
	return 0
}

// DetokenizeBytes returns the text of ids as the bytes they spell (which
// may be invalid UTF-8). skipSpecial: control tokens give no text.
func (t *Tokenizer) DetokenizeBytes(ids []int32, skipSpecial bool) ([]byte, error) {
	var out []byte
	var cIDs *C.int32_t
	if len(ids) > 0 {
		cIDs = (*C.int32_t)(unsafe.Pointer(&ids[0]))
	}
	err := t.use(func(p *C.qsp_tokenizer) (err error) {
		out, err = sizedText(firstBytes, func(buf *C.char, c C.uint64_t, n *C.uint64_t, msg **C.char) C.qsp_status {
			return C.goqsp_detokenize(p, cIDs, C.uint64_t(len(ids)), detokFlags(skipSpecial), buf, c, n, msg)
		})
		return err
	})
	return out, err
}

// Detokenize returns the text of ids as a string (raw bytes: a Go string may
// hold invalid UTF-8).
func (t *Tokenizer) Detokenize(ids []int32, skipSpecial bool) (string, error) {
	b, err := t.DetokenizeBytes(ids, skipSpecial)
	return string(b), err
}

// TokenPiece returns the bytes of one token on its own (possibly part of a
// UTF-8 sequence). StatusOutOfRange for an id outside 0..NVocab-1.
func (t *Tokenizer) TokenPiece(id int32, skipSpecial bool) ([]byte, error) {
	var out []byte
	err := t.use(func(p *C.qsp_tokenizer) (err error) {
		out, err = sizedText(64, func(buf *C.char, c C.uint64_t, n *C.uint64_t, msg **C.char) C.qsp_status {
			return C.goqsp_token_piece(p, C.int32_t(id), detokFlags(skipSpecial), buf, c, n, msg)
		})
		return err
	})
	return out, err
}

// TextStream decodes generated ids one at a time (qsp_text_stream): Push
// returns the text that became complete, holding back the bytes of a UTF-8
// character until a later token completes it; Flush returns what is held
// back and starts over. All pushes plus the flush equal Detokenize of the
// same ids. Close it when done (a finalizer frees a forgotten one); it fails
// once its Tokenizer is closed. One goroutine at a time.
type TextStream struct {
	tok   *Tokenizer
	ptr   *C.qsp_text_stream
	first int
}

var errStreamClosed = &Error{StatusInvalidArgument, "the TextStream is closed"}

// NewStream makes a TextStream; skipSpecial: control tokens give no text.
func (t *Tokenizer) NewStream(skipSpecial bool) (*TextStream, error) {
	info, err := t.Info()
	if err != nil {
		return nil, err
	}
	var ptr *C.qsp_text_stream
	err = t.use(func(p *C.qsp_tokenizer) error {
		var msg *C.char
		return takeMessage(C.goqsp_text_stream_create(p, detokFlags(skipSpecial), &ptr, &msg), msg)
	})
	if err != nil {
		return nil, err
	}
	s := &TextStream{tok: t, ptr: ptr, first: int(info.MaxPieceBytes) + 4}
	runtime.SetFinalizer(s, (*TextStream).Close)
	return s, nil
}

// Close frees the stream. Idempotent.
func (s *TextStream) Close() error {
	if s.ptr != nil {
		C.qsp_text_stream_destroy(s.ptr)
		s.ptr = nil
		runtime.SetFinalizer(s, nil)
	}
	return nil
}

func (s *TextStream) run(call func(buf *C.char, c C.uint64_t, n *C.uint64_t, msg **C.char) C.qsp_status) ([]byte, error) {
	if s.ptr == nil {
		return nil, errStreamClosed
	}
	var out []byte
	err := s.tok.use(func(*C.qsp_tokenizer) (err error) {
		out, err = sizedText(s.first, call)
		return err
	})
	runtime.KeepAlive(s)
	return out, err
}

// Push adds one id and returns the text that became complete.
func (s *TextStream) Push(id int32) (string, error) {
	b, err := s.run(func(buf *C.char, c C.uint64_t, n *C.uint64_t, msg **C.char) C.qsp_status {
		return C.goqsp_text_stream_push(s.ptr, C.int32_t(id), buf, c, n, msg)
	})
	return string(b), err
}

// Flush returns what is held back (an unfinished character as its raw
// bytes) and resets the stream to its start.
func (s *TextStream) Flush() (string, error) {
	b, err := s.run(func(buf *C.char, c C.uint64_t, n *C.uint64_t, msg **C.char) C.qsp_status {
		return C.goqsp_text_stream_flush(s.ptr, buf, c, n, msg)
	})
	return string(b), err
}
