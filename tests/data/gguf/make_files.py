#!/usr/bin/env python3
"""Writes the small hand-made GGUF files of tests/data/gguf (no .gguf suffix:
.gitignore ignores *.gguf). Run from anywhere; the output is deterministic.

  types_mix     a valid llama-named file whose tensors are of types qsp does
                not compute (iq4_nl, mxfp4, nvfp4 x2) next to an f32 one:
                `qsp info` must describe it and name those types
  type_id_43    one tensor of GGML type id 43, newer than the reader
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ALIGN = 32
# GGML type id: (block elements, bytes per block), from ggml.c type_traits.
TRAITS = {0: (1, 4), 20: (32, 18), 39: (32, 17), 40: (64, 36), 43: (32, 18)}


def gguf(kvs, tensors):
    b = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))

    def s(x):
        b.extend(struct.pack("<Q", len(x)) + x.encode())

    for k, v in kvs:
        s(k)
        b.extend(struct.pack("<I", 8))
        s(v)
    off = 0
    sizes = []
    for name, t, ne in tensors:
        s(name)
        b.extend(struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne))
        blk, nbytes = TRAITS[t]
        rows = 1
        for d in ne[1:]:
            rows *= d
        size = ne[0] // blk * nbytes * rows
        b.extend(struct.pack("<IQ", t, off))
        sizes.append(size)
        off += (size + ALIGN - 1) // ALIGN * ALIGN
    b.extend(bytes(-len(b) % ALIGN))
    for size in sizes:
        b.extend(bytes(size))
        b.extend(bytes(-len(b) % ALIGN))
    return bytes(b)


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


write("types_mix", gguf([("general.architecture", "llama"), ("general.name", "types mix")],
                        [("output_norm.weight", 0, [32]), ("a.weight", 20, [32, 2]), ("b.weight", 39, [32, 2]),
                         ("c.weight", 40, [64, 2]), ("d.weight", 40, [128])]))
write("type_id_43", gguf([("general.architecture", "llama")], [("x.weight", 43, [32])]))
