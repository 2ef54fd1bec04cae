// A one-layer model with F32 weights from a formula: prefill six tokens,
// print the greedy next token, and show an error. See ../README.md.
using System;
using Qsp;

static class Prefill
{
    // Norm vectors are 1.0; matrices ((31 i + 17 handle) mod 23 - 11) / 64.
    static Tensor F32(ulong handle, ulong rows, ulong cols)
    {
        var v = new float[rows * cols];
        for (ulong i = 0; i < rows * cols; ++i)
            v[i] = rows == 1 ? 1.0f : (float)((int)((31 * i + 17 * handle) % 23) - 11) / 64.0f;
        var bytes = new byte[v.Length * 4];
        Buffer.BlockCopy(v, 0, bytes, 0, bytes.Length);
        return new Tensor(handle, DType.F32, rows, cols, bytes);
    }

    static int Main()
    {
        var p = new ContextParams
        {
            NLayers = 1, HiddenSize = 32, IntermediateSize = 64, NHeads = 2, NKvHeads = 1, HeadDim = 16,
            VocabSize = 64, MaxSeqLen = 16, Backend = Backend.Cpu, NThreads = 1,
        };
        const ulong h = 32, f = 64, d = 16, q = 32, kv = 16, vocab = 64;
        using (var ctx = new Context(p))
        {
            var layer = new LayerWeights
            {
                AttnNorm = F32(0x100, 1, h), Wq = F32(0x101, q, h), Wk = F32(0x102, kv, h), Wv = F32(0x103, kv, h),
                QNorm = F32(0x104, 1, d), KNorm = F32(0x105, 1, d), Wo = F32(0x106, h, q), FfnNorm = F32(0x107, 1, h),
                WGate = F32(0x108, f, h), WUp = F32(0x109, f, h), WDown = F32(0x10A, h, f),
            };
            ctx.UploadLayer(0, layer);
            ctx.UploadEmbedding(F32(0x120, vocab, h));
            ctx.UploadOutput(F32(0x121, 1, h), F32(0x122, vocab, h));
            ctx.Prefill(new[] { 3, 14, 15, 9, 2, 6 });
            float[] logits = ctx.Logits(); // a copy; LogitsPointer borrows without copying
            Console.WriteLine("{0} logits; greedy next token: {1}", logits.Length, ctx.GreedyToken());
            try
            {
                ctx.UploadLayer(1, layer); // the model has one layer
            }
            catch (QspException e)
            {
                Console.WriteLine("error: {0} - {1}", e.Status, e.LibraryMessage);
            }
        }
        return 0;
    }
}
