#!/usr/bin/env python3
"""An independent GGUF reader (standard library only) that checks a file
against the GGUF spec as llama.cpp's gguf.py / ggml read it, and prints its
tensor directory as "name type ne0,ne1,.. offset n_bytes" lines (offset
absolute), so a test can compare it with `qsp info --tensors`.

usage: gguf_check.py FILE [--expect-arch ARCH] [--list]
Exits 1 with a message on the first violation.
"""
import struct
import sys

GGUF_MAGIC = b"GGUF"
# GGML type id -> (name, block size, bytes per block)
TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
         6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
         10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144),
         13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
         30: ("bf16", 1, 2)}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}


def fail(msg):
    print("gguf_check: " + msg, file=sys.stderr)
    sys.exit(1)


class Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0

    def take(self, n, what):
        if self.p + n > len(self.d):
            fail("truncated reading %s at %d" % (what, self.p))
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def scalar(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.scalar("<Q", what + " length")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            fail("%s is not UTF-8" % what)

    def value(self, t, what):
        if t in SCALARS:
            return self.scalar(SCALARS[t], what)
        if t == 8:
            return self.string(what)
        if t == 9:
            et = self.scalar("<I", what + " element type")
            n = self.scalar("<Q", what + " count")
            return [self.value(et, what) for _ in range(n)]
        fail("%s: unknown value type %d" % (what, t))


def half(b):
    return struct.unpack("<e", b)[0]


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: gguf_check.py FILE [--expect-arch ARCH] [--list]")
    path = args[0]
    expect_arch = args[args.index("--expect-arch") + 1] if "--expect-arch" in args else None
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    if r.take(4, "magic") != GGUF_MAGIC:
        fail("bad magic")
    version = r.scalar("<I", "version")
    if version != 3:
        fail("version %d, expected 3" % version)
    n_tensors = r.scalar("<Q", "tensor count")
    n_kv = r.scalar("<Q", "kv count")
    kv = {}
    for i in range(n_kv):
        key = r.string("key %d" % i)
        t = r.scalar("<I", "type of " + key)
        if key in kv:
            fail("duplicate key " + key)
        kv[key] = (t, r.value(t, key))
    align = kv.get("general.alignment", (4, 32))
    if align[0] != 4:
        fail("general.alignment must be a u32")
    align = align[1]
    arch = kv.get("general.architecture", (8, None))[1]
    if expect_arch and arch != expect_arch:
        fail("architecture %r, expected %r" % (arch, expect_arch))
    for k in ["general.name", "%s.block_count" % arch, "%s.embedding_length" % arch,
              "%s.feed_forward_length" % arch, "%s.attention.head_count" % arch,
              "%s.attention.head_count_kv" % arch, "%s.context_length" % arch,
              "%s.rope.freq_base" % arch, "%s.attention.layer_norm_rms_epsilon" % arch,
              "%s.vocab_size" % arch, "tokenizer.ggml.model"]:
        if k not in kv:
            fail("missing key " + k)
    if kv["tokenizer.ggml.model"][1] != "none":
        fail("tokenizer.ggml.model is not 'none'")
    tensors = []
    for i in range(n_tensors):
        name = r.string("tensor name %d" % i)
        nd = r.scalar("<I", name + " n_dims")
        if not 1 <= nd <= 4:
            fail("%s: n_dims %d" % (name, nd))
        ne = [r.scalar("<Q", name + " dim") for _ in range(nd)]
        t = r.scalar("<I", name + " type")
        off = r.scalar("<Q", name + " offset")
        if t not in TYPES:
            fail("%s: type %d" % (name, t))
        tname, bs, ts = TYPES[t]
        if ne[0] % bs:
            fail("%s: ne[0] %d not a multiple of %d" % (name, ne[0], bs))
        if off % align:
            fail("%s: offset %d not aligned to %d" % (name, off, align))
        rows = 1
        for d in ne[1:]:
            rows *= d
        nbytes = ne[0] // bs * ts * rows
        tensors.append((name, t, tname, ne, off, nbytes))
    data_start = (r.p + align - 1) // align * align
    if any(data[r.p:data_start]):
        fail("padding before the data section is not zero")
    # Tensors are laid out in order, each padded to the alignment, no gaps or overlaps.
    expect = 0
    for name, t, tname, ne, off, nbytes in tensors:
        if off != expect:
            fail("%s: offset %d, expected %d (contiguous, aligned layout)" % (name, off, expect))
        expect = (off + nbytes + align - 1) // align * align
    if data_start + expect != len(data):
        fail("file size %d, expected %d" % (len(data), data_start + expect))
    # Spot-check the values: norms near 1, matrix weights small and not all zero.
    for name, t, tname, ne, off, nbytes in tensors:
        p = data_start + off
        if t == 0:
            vals = struct.unpack("<%df" % min(ne[0], 64), data[p:p + 4 * min(ne[0], 64)])
            if name.endswith("norm.weight") and not 0.0 < sum(vals) / len(vals) < 2.0:
                fail("%s: norm weights average %f" % (name, sum(vals) / len(vals)))
        elif t in (2, 8):
            d = half(data[p:p + 2])
            if not 0.0 < abs(d) < 1.0:
                fail("%s: first block scale %f" % (name, d))
        elif t in (1, 30):
            raw = data[p:p + 2]
            v = half(raw) if t == 1 else struct.unpack("<f", b"\0\0" + raw)[0]
            if not abs(v) < 1.0:
                fail("%s: first value %f" % (name, v))
    if "--list" in args:
        for name, t, tname, ne, off, nbytes in tensors:
            print("%s %s %s %d %d" % (name, tname, ",".join(str(x) for x in ne), data_start + off, nbytes))
    else:
        print("OK: %s: GGUF v%d, %s, %d keys, %d tensors, %d bytes" %
              (path, version, arch, n_kv, n_tensors, len(data)))


if __name__ == "__main__":
    main()
