"""The tokenizer of a GGUF file (qsp_gguf.h, libqsp >= 1.2): Tokenizer and
TextStream."""

import ctypes
import weakref
from collections import namedtuple

from . import _ffi
from ._gguf import ModelFile, _check_gguf
from ._status import QspError, Status, _Handle, _s, version, version_number

_lib = _ffi.lib


TokenizerInfo = namedtuple("TokenizerInfo", "kind n_vocab bos_id eos_id eot_id add_bos add_eos max_piece_bytes model "
                                            "pre chat_template unicode_version")
TokenizerInfo.__doc__ = """What a Tokenizer is (the fields of qsp_tokenizer_info): ``kind`` 1 byte-level
BPE ("gpt2"), 2 SentencePiece-style ("llama"); ids of -1 where the model has
none; ``add_bos``/``add_eos`` bools; strings are str ("" where absent)."""

#: qsp_tokenize / qsp_detokenize flags.
TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
DETOKENIZE_SKIP_SPECIAL = 1

_FIRST_IDS = 256      # the first buffer of tokenize, in ids (grown on BUFFER_TOO_SMALL)
_FIRST_BYTES = 1024   # the first buffer of the text functions, in bytes
_BUFFER_TOO_SMALL = -17


def _tokenizer_needs():
    """None when the loaded library has the tokenizer, else why not."""
    if getattr(_lib, "qsp_tokenizer_create", None) is not None and version_number() >= 10200:
        return None
    return ("the tokenizer needs libqsp >= 1.2.0 (qsp_tokenizer_create); the loaded library is %s. "
            "Everything else works with it" % version())


def _sized_text(call, first=_FIRST_BYTES):
    """Runs ``call(buf, capacity, len_ptr)`` with the size-query protocol:
    once with ``first`` bytes, again with the needed length on
    BUFFER_TOO_SMALL. Returns the bytes written."""
    cap = first
    n = ctypes.c_uint64()
    while True:
        buf = ctypes.create_string_buffer(max(cap, 1))
        st = call(buf, cap, ctypes.byref(n))
        if st == _BUFFER_TOO_SMALL and n.value > cap:
            cap = n.value
            continue
        _check_gguf(st)
        return buf.raw[:n.value]


def _utf8(b):
    return b.decode("utf-8", "replace")


class Tokenizer(_Handle, free="qsp_tokenizer_destroy"):
    """The tokenizer a GGUF file carries (libqsp >= 1.2): text to token ids and
    back. Build it from a ModelFile (``model_file.tokenizer()``) or a path;
    it copies what it needs, so the file may be closed afterwards. Use it in a
    ``with`` block or call ``close()`` (closing it closes its TextStreams); a
    forgotten one is freed when garbage-collected. Immutable: safe to share
    between threads as long as none closes it meanwhile.

    Raises QspError: UNSUPPORTED for a file without a tokenizer
    (tokenizer.ggml.model absent or "none") or one qsp does not implement,
    BAD_FORMAT for a malformed vocabulary; with a library older than 1.2,
    UNSUPPORTED naming the version needed."""

    def __init__(self, source):
        self._ptr = None
        self._streams = weakref.WeakSet()
        why = _tokenizer_needs()
        if why is not None:
            raise QspError(Status.UNSUPPORTED, why)
        if isinstance(source, ModelFile):
            self._create(source)
        else:
            with ModelFile(source) as f:
                self._create(f)

    def _create(self, f):
        ptr = _ffi.qsp_tokenizer_p()
        _check_gguf(_lib.qsp_tokenizer_create(f._p(), ctypes.byref(ptr)))
        self._ptr = ptr

    def close(self):
        """Frees the tokenizer and its open streams (idempotent)."""
        for s in list(self._streams):
            s.close()
        ptr, self._ptr = self._ptr, None
        if ptr:
            _lib.qsp_tokenizer_destroy(ptr)

    def info(self):
        """A TokenizerInfo."""
        i = _ffi.qsp_tokenizer_info()
        _lib.qsp_tokenizer_info_init(ctypes.byref(i))
        _check_gguf(_lib.qsp_tokenizer_get_info(self._p(), ctypes.byref(i)))
        return TokenizerInfo(i.kind, i.n_vocab, i.bos_id, i.eos_id, i.eot_id, bool(i.add_bos), bool(i.add_eos),
                             i.max_piece_bytes, _s(i.model), _s(i.pre), _s(i.chat_template), _s(i.unicode_version))

    @property
    def n_vocab(self):
        return self.info().n_vocab

    def tokenize(self, text, add_special=True, parse_special=False):
        """Token ids (a list of int) of ``text``: a str (encoded as UTF-8) or
        bytes (UTF-8; invalid sequences are tokenized as U+FFFD).
        ``add_special``: add BOS/EOS as the model does; ``parse_special``:
        text spelling a control token ("<|im_end|>") becomes that token."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        flags = (TOKENIZE_ADD_SPECIAL if add_special else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        p = self._p()
        cap = _FIRST_IDS
        n = ctypes.c_uint64()
        while True:
            ids = (ctypes.c_int32 * max(cap, 1))()
            st = _lib.qsp_tokenize(p, data, len(data), flags, ids, cap, ctypes.byref(n))
            if st == _BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check_gguf(st)
            return ids[:n.value]

    def _ids(self, ids):
        ids = [int(i) for i in ids]
        return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)

    def detokenize_bytes(self, ids, skip_special=False):
        """The text of ``ids`` as raw bytes (what the ids spell, which may be
        invalid UTF-8). ``skip_special``: control tokens give no text."""
        arr, n = self._ids(ids)
        p = self._p()
        flags = DETOKENIZE_SKIP_SPECIAL if skip_special else 0
        return _sized_text(lambda buf, cap, ln: _lib.qsp_detokenize(p, arr, n, flags, buf, cap, ln))

    def detokenize(self, ids, skip_special=False):
        """The text of ``ids`` as str (invalid UTF-8 becomes U+FFFD)."""
        return _utf8(self.detokenize_bytes(ids, skip_special))

    def token_piece(self, token_id, skip_special=False):
        """The bytes of one token on its own (possibly part of a UTF-8
        sequence); QspError OUT_OF_RANGE for an id outside 0..n_vocab-1."""
        p = self._p()
        flags = DETOKENIZE_SKIP_SPECIAL if skip_special else 0
        return _sized_text(lambda buf, cap, ln: _lib.qsp_token_piece(p, int(token_id), flags, buf, cap, ln), 64)

    def stream(self, skip_special=False):
        """A TextStream for decoding generated ids one at a time."""
        return TextStream(self, skip_special)


class TextStream(_Handle, free="qsp_text_stream_destroy"):
    """Streaming detokenization (qsp_text_stream): ``push(id)`` returns the
    text that became complete (a str; the bytes of an unfinished UTF-8
    character are held back until a later token completes it), ``flush()``
    what is held back and starts over; all pushes plus the flush equal
    ``detokenize`` of the same ids. ``push_bytes``/``flush_bytes`` give raw
    bytes. Use it in a ``with`` block or call ``close()``; it is closed with
    its Tokenizer. One thread at a time."""

    def __init__(self, tokenizer, skip_special=False):
        self._ptr = None
        ptr = _ffi.qsp_text_stream_p()
        _check_gguf(_lib.qsp_text_stream_create(tokenizer._p(), DETOKENIZE_SKIP_SPECIAL if skip_special else 0,
                                                ctypes.byref(ptr)))
        self._ptr = ptr
        self._tokenizer = tokenizer  # must outlive the stream
        tokenizer._streams.add(self)
        self._first = tokenizer.info().max_piece_bytes + 4

    def close(self):
        ptr, self._ptr = self._ptr, None
        if ptr:
            _lib.qsp_text_stream_destroy(ptr)
        self._tokenizer = None

    def push_bytes(self, token_id):
        p = self._p()
        return _sized_text(lambda buf, cap, ln: _lib.qsp_text_stream_push(p, int(token_id), buf, cap, ln), self._first)

    def flush_bytes(self):
        p = self._p()
        return _sized_text(lambda buf, cap, ln: _lib.qsp_text_stream_flush(p, buf, cap, ln), self._first)

    def push(self, token_id):
        return _utf8(self.push_bytes(token_id))

    def flush(self):
        return _utf8(self.flush_bytes())


def _model_file_tokenizer(self):
    """The Tokenizer of this file (see Tokenizer)."""
    return Tokenizer(self)


ModelFile.tokenizer = _model_file_tokenizer
