"""The tokenizer of a GGUF file (issue 18, libqsp >= 1.2), on the vocabulary
of common/tok.gguf (QSP_TOK_GGUF; common/make_tok_gguf.py describes it):
byte-level BPE, ids 0..255 are the bytes, 259 is "hello", 260 <|bos|> (added),
261 <|eos|>, 262 <|im_end|> (eot), 263 <think> (user-defined)."""

import gc
import os

import pytest

import qsp

BOS, EOS, EOT, THINK, HELLO = 260, 261, 262, 263, 259


def _env(name):
    v = os.environ.get(name)
    if not v:
        pytest.skip("%s is not set (ctest sets it)" % name)
    return v


@pytest.fixture(scope="module")
def tok():
    with qsp.Tokenizer(_env("QSP_TOK_GGUF")) as t:
        yield t


def test_info(tok):
    i = tok.info()
    assert (i.kind, i.n_vocab, i.bos_id, i.eos_id, i.eot_id) == (1, 264, BOS, EOS, EOT)
    assert i.add_bos is True and i.add_eos is False
    assert (i.model, i.pre, i.chat_template) == ("gpt2", "qwen2", "{{ messages }}")
    assert i.max_piece_bytes >= len("<|im_end|>") and i.unicode_version
    assert tok.n_vocab == 264


def test_round_trip(tok):
    for text in ["hello world", "héllo € 日本語 🙂", "", "a\nb\tc  d"]:
        ids = tok.tokenize(text, add_special=False)
        assert all(isinstance(i, int) for i in ids)
        assert tok.detokenize(ids) == text
        assert tok.detokenize_bytes(ids) == text.encode()
        assert tok.tokenize(text.encode(), add_special=False) == ids  # bytes in
    assert tok.tokenize("hello", add_special=False) == [HELLO]
    assert tok.tokenize("hé", add_special=False) == [ord("h"), 0xC3, 0xA9]


def test_special(tok):
    assert tok.tokenize("hello") == [BOS, HELLO]  # add_special defaults to True
    assert tok.tokenize("hello", add_special=False) == [HELLO]
    text = "<|im_end|><think>x"
    plain = tok.tokenize(text, add_special=False)
    assert EOT not in plain and THINK in plain  # user-defined tokens always match
    assert tok.tokenize(text, add_special=False, parse_special=True) == [EOT, THINK, ord("x")]
    ids = tok.tokenize(text, parse_special=True)
    assert tok.detokenize(ids) == "<|bos|>" + text
    assert tok.detokenize(ids, skip_special=True) == "<think>x"
    assert tok.token_piece(BOS) == b"<|bos|>"
    assert tok.token_piece(BOS, skip_special=True) == b""
    assert tok.token_piece(0xE2) == b"\xe2"  # raw bytes: part of a UTF-8 sequence
    with pytest.raises(qsp.QspError) as e:
        tok.token_piece(264)
    assert e.value.status == qsp.Status.OUT_OF_RANGE
    with pytest.raises(qsp.QspError) as e:
        tok.detokenize([1, -1])
    assert e.value.status == qsp.Status.OUT_OF_RANGE


def test_stream_holds_back_split_character(tok):
    ids = tok.tokenize("a€b", add_special=False)
    assert ids == [ord("a"), 0xE2, 0x82, 0xAC, ord("b")]
    with tok.stream() as s:
        assert [s.push(i) for i in ids] == ["a", "", "", "€", "b"]
        assert s.flush() == ""
        # an unfinished character comes out of flush as its raw bytes
        assert s.push_bytes(0xE2) == b"" and s.push_bytes(0x82) == b""
        assert s.flush_bytes() == b"\xe2\x82"
        # after a flush the stream starts over
        assert s.push(HELLO) == "hello"
    with tok.stream(skip_special=True) as s:
        assert "".join(s.push(i) for i in [BOS, HELLO, EOS]) + s.flush() == "hello"
    assert s.closed
    with pytest.raises(ValueError):
        s.push(1)


def test_long_text_grows_buffers(tok):
    text = "hello wörld € " * 2000  # more ids and bytes than the first buffers hold
    ids = tok.tokenize(text)
    assert len(ids) > 256 and ids[0] == BOS
    assert tok.detokenize(ids, skip_special=True) == text
    s = tok.stream(skip_special=True)
    assert "".join(s.push(i) for i in ids) + s.flush() == text


def test_model_file_and_no_tokenizer():
    with qsp.ModelFile(_env("QSP_TOK_GGUF")) as f:
        t = f.tokenizer()
    assert t.tokenize("hello") == [BOS, HELLO]  # the file may be closed
    s = t.stream()
    t.close()
    assert t.closed and s.closed  # closing the tokenizer closes its streams
    with pytest.raises(ValueError):
        t.tokenize("x")
    # the synthesized tiny model has tokenizer.ggml.model = "none"
    with pytest.raises(qsp.QspError) as e:
        qsp.Tokenizer(_env("QSP_GGUF_MODEL"))
    assert e.value.status == qsp.Status.UNSUPPORTED and "none" in e.value.message
    with pytest.raises(qsp.QspError) as e:
        qsp.Tokenizer("/nonexistent/model.gguf")
    assert e.value.status == qsp.Status.IO
    t = qsp.Tokenizer(_env("QSP_TOK_GGUF"))
    del t
    gc.collect()  # a forgotten one is freed by __del__
