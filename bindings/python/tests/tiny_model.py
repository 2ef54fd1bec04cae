"""The bindings' test model "tiny-v1" (bindings/common/MODEL.md), in Python."""

import struct

import qsp

BASE = 0x5153500000000000
MASK = (1 << 64) - 1
TOKENS = [1, 7, 42, 100, 255, 0, 128, 64, 3, 200]
PARAMS = dict(n_layers=2, hidden_size=64, intermediate_size=128, n_heads=4, n_kv_heads=2, head_dim=16,
              vocab_size=256, max_seq_len=32, backend=qsp.Backend.CPU, n_threads=2)


def gen_bytes(handle, dtype, rows, cols):
    s = (handle * 0x9E3779B97F4A7C15) & MASK

    def nxt():
        nonlocal s
        x = s
        x ^= (x << 13) & MASK
        x ^= x >> 7
        x ^= (x << 17) & MASK
        s = x
        return x

    out = bytearray()
    if dtype == qsp.DType.F32:
        for _ in range(rows * cols):
            out += struct.pack("<I", 0x3F000000 | (nxt() >> 41))
    elif dtype == qsp.DType.Q8_0:
        for _ in range(rows * cols // 32):
            out += struct.pack("<H", 0x1400 | (nxt() & 0x3FF))
            for _ in range(4):
                out += nxt().to_bytes(8, "little")
    elif dtype == qsp.DType.Q4_0:
        for _ in range(rows * cols // 32):
            out += struct.pack("<H", 0x2000 | (nxt() & 0x3FF))
            for _ in range(2):
                out += nxt().to_bytes(8, "little")
    else:
        raise ValueError(dtype)
    assert len(out) == qsp.dtype_size(dtype, rows, cols)
    return bytes(out)


def tensor(handle, dtype, rows, cols):
    return qsp.Tensor(handle, dtype, rows, cols, gen_bytes(handle, dtype, rows, cols))


class TinyModel:
    """All tensors of the model, generated once."""

    def __init__(self):
        P = PARAMS
        H, F, D = P["hidden_size"], P["intermediate_size"], P["head_dim"]
        Q, KV = P["n_heads"] * D, P["n_kv_heads"] * D
        self.layers = []
        for l in range(P["n_layers"]):
            wt = qsp.DType.Q4_0 if l % 2 == 0 else qsp.DType.Q8_0
            h = BASE + 0x100 * (l + 1)
            F32 = qsp.DType.F32
            self.layers.append(qsp.LayerWeights(
                attn_norm=tensor(h + 0, F32, 1, H), wq=tensor(h + 1, wt, Q, H), wk=tensor(h + 2, wt, KV, H),
                wv=tensor(h + 3, wt, KV, H), q_norm=tensor(h + 4, F32, 1, D), k_norm=tensor(h + 5, F32, 1, D),
                wo=tensor(h + 6, wt, H, Q), ffn_norm=tensor(h + 7, F32, 1, H), w_gate=tensor(h + 8, wt, F, H),
                w_up=tensor(h + 9, wt, F, H), w_down=tensor(h + 10, wt, H, F)))
        self.embd = tensor(BASE + 1, qsp.DType.Q8_0, P["vocab_size"], H)
        self.norm = tensor(BASE + 2, qsp.DType.F32, 1, H)
        self.lm_head = tensor(BASE + 3, qsp.DType.Q4_0, P["vocab_size"], H)

    n_tensors = 2 * 11 + 3

    def upload(self, ctx):
        for i, w in enumerate(self.layers):
            ctx.upload_layer(i, w)
        ctx.upload_embedding(self.embd)
        ctx.upload_output(self.norm, self.lm_head)

    def context(self, **overrides):
        p = dict(PARAMS)
        p.update(overrides)
        ctx = qsp.Context(**p)
        try:
            self.upload(ctx)
        except BaseException:
            ctx.close()
            raise
        return ctx
