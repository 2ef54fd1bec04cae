#!/usr/bin/env python3
"""Writes tok.gguf, the bindings' tokenizer test vocabulary (committed next to
this script; regenerate with `python3 make_tok_gguf.py tok.gguf`).

A vocabulary-only GGUF (no tensors), byte-level BPE ("gpt2", pre "qwen2"):
  ids 0..255    the 256 bytes in byte order (id == byte value), spelled as
                GPT-2's byte-to-unicode map spells them
  256..         merges, in rank order: h+e, l+l, he+ll, hell+o  ->  "he", "ll",
                "hell", "hello"   (so "hello" is one token, 259)
  260 <|bos|>   control (type 3): bos_token_id, add_bos_token = true
  261 <|eos|>   control: eos_token_id
  262 <|im_end|> control: eot_token_id
  263 <think>   user-defined (type 4): always matched
Multi-byte UTF-8 ("é" = c3 a9, "€" = e2 82 ac) has no merges: each byte is
its own token, so a stream must hold a character back until it is complete.
tokenizer.chat_template is "{{ messages }}".
"""
import struct
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def bl(raw):
    return "".join(B2U[b] for b in raw.encode("utf-8"))


def s(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)


def kv_u32(k, v):
    return s(k) + struct.pack("<II", 4, v)


def kv_bool(k, v):
    return s(k) + struct.pack("<IB", 7, 1 if v else 0)


def kv_str_arr(k, vs):
    return s(k) + struct.pack("<IIQ", 9, 8, len(vs)) + b"".join(s(v) for v in vs)


def kv_i32_arr(k, vs):
    return s(k) + struct.pack("<IIQ", 9, 5, len(vs)) + b"".join(struct.pack("<i", v) for v in vs)


def main(path):
    tokens = [B2U[b] for b in range(256)]
    types = [1] * 256
    merges = []
    for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o")]:
        merges.append(bl(a) + " " + bl(b))
        tokens.append(bl(a + b))
        types.append(1)
    for t, ty in [("<|bos|>", 3), ("<|eos|>", 3), ("<|im_end|>", 3), ("<think>", 4)]:
        tokens.append(t)
        types.append(ty)
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_str("tokenizer.ggml.model", "gpt2"),
        kv_str("tokenizer.ggml.pre", "qwen2"),
        kv_str_arr("tokenizer.ggml.tokens", tokens),
        kv_i32_arr("tokenizer.ggml.token_type", types),
        kv_str_arr("tokenizer.ggml.merges", merges),
        kv_u32("tokenizer.ggml.bos_token_id", 260),
        kv_u32("tokenizer.ggml.eos_token_id", 261),
        kv_u32("tokenizer.ggml.eot_token_id", 262),
        kv_bool("tokenizer.ggml.add_bos_token", True),
        kv_str("tokenizer.chat_template", "{{ messages }}"),
    ]
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tok.gguf")
