// Context.PrefillBatch (qsp_prefill_batch, libqsp >= 1.1) against single
// prefills: a prompt, a decode step on an existing cache and an embeddings
// piece must leave each context exactly as Prefill / PrefillEmbeddings do
// (CPU: bit for bit); an invalid batch throws QspException naming the sequence
// and changes nothing.
using System;
using System.Collections.Generic;
using System.IO;
using Qsp;

static partial class Tests
{
    static readonly int[] Cached = { 1, 7, 42, 100, 255, 0 };  // TinyModel.Tokens[0..6)
    static readonly int[] Step = { 128 };                       // TinyModel.Tokens[6]

    // n x 64 exact float32 values (multiples of 1/64).
    static float[] HiddenStates(int n)
    {
        var h = new float[n * 64];
        for (int i = 0; i < h.Length; ++i) h[i] = ((i * 37) % 101 - 50) / 64.0f;
        return h;
    }

    // Three contexts: empty, with Cached in its cache, empty.
    static Context[] Trio()
    {
        var cs = new[] { TinyModel.Create(), TinyModel.Create(), TinyModel.Create() };
        cs[1].Prefill(Cached);
        return cs;
    }

    static void DisposeAll(Context[] cs)
    {
        foreach (var c in cs) c.Dispose();
    }

    // "kv greedy logits-as-hex", or "kv -" without logits.
    static string State(Context c)
    {
        uint kv = c.KvLength;
        try
        {
            var l = c.Logits();
            return kv + " " + c.GreedyToken() + " " + BitConverter.ToString(Bytes(l));
        }
        catch (QspException e)
        {
            Eq(e.Status, Status.NotReady, "no logits yet");
            return kv + " -";
        }
    }

    static void PrefillBatchEqualsSinglePrefills()
    {
        var b = Trio();
        var s = Trio();
        try
        {
            var embd = HiddenStates(3);
            Context.PrefillBatch(new BatchPiece(b[0], TinyModel.Tokens), new BatchPiece(b[1], Step),
                                 new BatchPiece(b[2], embd));
            s[0].Prefill(TinyModel.Tokens);
            s[1].Prefill(Step);
            s[2].PrefillEmbeddings(embd);
            for (int i = 0; i < 3; ++i)
            {
                Assert(!State(s[i]).EndsWith(" -"), "single " + i + " has logits");
                Eq(State(b[i]), State(s[i]), "piece " + i + ": kv, greedy token, logits bit for bit");
            }
            Eq(b[0].KvLength + "," + b[1].KvLength + "," + b[2].KvLength, "10,7,3", "kv lengths");
            var logits = b[0].Logits();
            int best = 0;
            for (int t = 1; t < logits.Length; ++t) if (logits[t] > logits[best]) best = t;
            Eq(b[0].GreedyToken(), best, "greedy = argmax");
            string refPath = Environment.GetEnvironmentVariable("QSP_REF_LOGITS");
            if (!string.IsNullOrEmpty(refPath))
                Assert(Same(Bytes(logits), File.ReadAllBytes(refPath)), "the batch's prompt logits are ref_logits.c's");
        }
        finally
        {
            DisposeAll(b);
            DisposeAll(s);
        }
    }

    static void PrefillBatchInvalidChangesNothing()
    {
        var b = Trio();
        try
        {
            Context.PrefillBatch(new BatchPiece(b[0], new[] { 1, 7, 42, 100 }), new BatchPiece(b[2], new[] { 5 }));
            var before = new List<string>();
            foreach (var c in b) before.Add(State(c));
            Action unchanged = () => { for (int i = 0; i < 3; ++i) Eq(State(b[i]), before[i], "context " + i + " unchanged"); };

            var e = Throws<QspException>(() => Context.PrefillBatch(
                new BatchPiece(b[0], new[] { 3 }), new BatchPiece(b[1], new[] { 4, 256 }), new BatchPiece(b[2], new[] { 5 })),
                "token 256 in sequence 1");
            Eq(e.Status, Status.OutOfRange, "status");
            Assert(e.LibraryMessage.Contains("sequence 1"), "message: " + e.LibraryMessage);
            unchanged();

            e = Throws<QspException>(() => Context.PrefillBatch(
                new BatchPiece(b[1], new[] { 3 }), new BatchPiece(b[1], new[] { 4 })), "the same context twice");
            Eq(e.Status, Status.InvalidArgument, "status");
            Assert(e.LibraryMessage.Contains("sequence 1"), "message: " + e.LibraryMessage);
            unchanged();

            e = Throws<QspException>(() => Context.PrefillBatch(), "no pieces");
            Eq(e.Status, Status.InvalidArgument, "status");
            e = Throws<QspException>(() => Context.PrefillBatch(
                new BatchPiece(b[0], new[] { 3 }), new BatchPiece(b[2], new float[70])), "not whole rows");
            Assert(e.LibraryMessage.Contains("sequence 1"), "message: " + e.LibraryMessage);
            var a = Throws<ArgumentException>(() => Context.PrefillBatch(
                new BatchPiece(b[0], new[] { 3 }), new BatchPiece(null, new[] { 4 })), "no context");
            Assert(a.Message.Contains("sequence 1"), "message: " + a.Message);
            var gone = TinyModel.Create();
            gone.Dispose();
            var d = Throws<ObjectDisposedException>(() => Context.PrefillBatch(
                new BatchPiece(b[0], new[] { 3 }), new BatchPiece(gone, new[] { 4 })), "disposed context");
            Assert(d.Message.Contains("sequence 1"), "message: " + d.Message);
            unchanged();

            // All still usable.
            Context.PrefillBatch(new BatchPiece(b[0], new[] { 9 }), new BatchPiece(b[1], new[] { 9 }),
                                 new BatchPiece(b[2], new[] { 9 }));
            for (int i = 0; i < 3; ++i) Eq(b[i].KvLength.ToString(), (uint.Parse(before[i].Split(' ')[0]) + 1).ToString(), "kv " + i);
        }
        finally
        {
            DisposeAll(b);
        }
    }

    // The README's serving loop on the GGUF model: every request's tokens
    // equal the same request decoded alone.
    static void PrefillBatchServingLoopExample()
    {
        string model = Env("QSP_GGUF_MODEL");
        var opts = new ExecOptions { Backend = Backend.Cpu, NThreads = 2 };
        int[][] prompts = { new[] { 1, 7, 42 }, new[] { 100, 255, 0, 128 }, new[] { 64 }, new[] { 3, 200, 5, 9, 11 } };

        // --- as in README.md ---
        var pieces = new BatchPiece[prompts.Length];
        for (int i = 0; i < prompts.Length; ++i)
            pieces[i] = new BatchPiece(Context.FromGguf(model, opts), prompts[i]);
        var outputs = new List<int>[prompts.Length];
        for (int i = 0; i < prompts.Length; ++i) outputs[i] = new List<int>();
        for (int step = 0; step < 4; ++step)
        {
            Context.PrefillBatch(pieces);                 // prompts and decode steps in one call
            for (int i = 0; i < pieces.Length; ++i)
            {
                int next = pieces[i].Context.GreedyToken();
                outputs[i].Add(next);
                pieces[i] = new BatchPiece(pieces[i].Context, new[] { next });  // then one token each
            }
        }
        foreach (var p in pieces) p.Context.Dispose();
        // --- end ---

        for (int i = 0; i < prompts.Length; ++i)
        {
            var alone = new List<int>();
            using (var c = Context.FromGguf(model, opts))
            {
                int[] piece = prompts[i];
                for (int step = 0; step < 4; ++step)
                {
                    c.Prefill(piece);
                    alone.Add(c.GreedyToken());
                    piece = new[] { alone[alone.Count - 1] };
                }
            }
            Eq(string.Join(" ", outputs[i]), string.Join(" ", alone), "request " + i);
        }
    }
}
