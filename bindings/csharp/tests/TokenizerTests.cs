// Tests of the tokenizer (issue 18), part of the bindings.csharp test program,
// on common/tok.gguf (QSP_TOK_GGUF; see common/make_tok_gguf.py): byte-level
// BPE, ids 0..255 are the bytes, 259 is "hello", 260 <|bos|> (added), 261
// <|eos|>, 262 <|im_end|> (eot), 263 <think> (user-defined).
using System;
using System.Linq;
using System.Text;
using Qsp;

static partial class Tests
{
    const int TokBos = 260, TokEos = 261, TokEot = 262, TokThink = 263, TokHello = 259;

    static string Ids(int[] ids) { return "[" + string.Join(",", ids) + "]"; }

    static void TokenizerInfoAndRoundTrip()
    {
        using (var t = Tokenizer.FromGguf(Env("QSP_TOK_GGUF")))
        {
            var i = t.Info();
            Eq(string.Format("{0} {1} {2} {3} {4} {5} {6}", i.Kind, i.NVocab, i.BosId, i.EosId, i.EotId, i.AddBos, i.AddEos),
               "1 264 260 261 262 True False", "info");
            Eq(i.Model + "|" + i.Pre + "|" + i.ChatTemplate, "gpt2|qwen2|{{ messages }}", "info strings");
            Assert(i.MaxPieceBytes >= 10 && i.UnicodeVersion.Length > 0, "max_piece_bytes, unicode_version");
            foreach (var text in new[] { "hello world", "héllo € 日本語 🙂", "", "a\nb\tc  d" })
            {
                var ids = t.Tokenize(text, addSpecial: false);
                Eq(t.Detokenize(ids), text, "round trip of " + text);
                Eq(Convert.ToBase64String(t.DetokenizeBytes(ids)), Convert.ToBase64String(Encoding.UTF8.GetBytes(text)),
                   "bytes of " + text);
                Eq(Ids(t.Tokenize(Encoding.UTF8.GetBytes(text), false)), Ids(ids), "bytes in");
            }
            Eq(Ids(t.Tokenize("hello", false)), Ids(new[] { TokHello }), "hello");
            Eq(Ids(t.Tokenize("hé", false)), Ids(new[] { 'h', 0xC3, 0xA9 }), "hé");
        }
    }

    static void TokenizerSpecial()
    {
        using (var t = Tokenizer.FromGguf(Env("QSP_TOK_GGUF")))
        {
            Eq(Ids(t.Tokenize("hello")), Ids(new[] { TokBos, TokHello }), "addSpecial defaults to true");
            const string text = "<|im_end|><think>x";
            Assert(!t.Tokenize(text, false).Contains(TokEot), "EOT without parseSpecial");
            Eq(Ids(t.Tokenize(text, false, parseSpecial: true)), Ids(new[] { TokEot, TokThink, 'x' }), "parseSpecial");
            var ids = t.Tokenize(text, true, true);
            Eq(t.Detokenize(ids), "<|bos|>" + text, "detokenize");
            Eq(t.Detokenize(ids, skipSpecial: true), "<think>x", "skipSpecial");
            Eq(Encoding.ASCII.GetString(t.TokenPiece(TokBos)), "<|bos|>", "piece");
            Eq(t.TokenPiece(TokBos, true).Length, 0, "piece, skipSpecial");
            Eq(Ids(t.TokenPiece(0xE2).Select(b => (int)b).ToArray()), "[226]", "byte piece");
            Eq(Throws<QspException>(() => t.TokenPiece(264), "piece 264").Status, Status.OutOfRange, "piece 264");
            Eq(Throws<QspException>(() => t.Detokenize(new[] { 1, -1 }), "id -1").Status, Status.OutOfRange, "id -1");
        }
    }

    static void TokenizerStreamHoldsBackSplitCharacter()
    {
        TextStream s;
        using (var t = Tokenizer.FromGguf(Env("QSP_TOK_GGUF")))
        {
            var ids = t.Tokenize("a€b", false);
            Eq(Ids(ids), Ids(new[] { 'a', 0xE2, 0x82, 0xAC, 'b' }), "a€b");
            using (var st = t.Stream())
            {
                Eq(string.Join("|", ids.Select(st.Push)), "a|||€|b", "pushes");
                Eq(st.Flush(), "", "flush");
                st.Push(0xE2);
                st.Push(0x82);
                Eq(Convert.ToBase64String(st.FlushBytes()), Convert.ToBase64String(new byte[] { 0xE2, 0x82 }), "raw flush");
                Eq(st.Push(TokHello), "hello", "after flush");
            }
            s = t.Stream(skipSpecial: true);
        }
        // the stream keeps the native tokenizer alive after the Tokenizer's Dispose
        Eq(s.Push(TokBos) + s.Push(TokHello) + s.Push(TokEos) + s.Flush(), "hello", "stream after Dispose");
        s.Dispose();
        Throws<ObjectDisposedException>(() => s.Push(1), "disposed stream");
    }

    static void TokenizerLongTextGrowsBuffers()
    {
        using (var t = Tokenizer.FromGguf(Env("QSP_TOK_GGUF")))
        {
            string text = string.Concat(Enumerable.Repeat("hello wörld € ", 2000));
            var ids = t.Tokenize(text);
            Assert(ids.Length > 256 && ids[0] == TokBos, "long text: " + ids.Length + " ids");
            Eq(t.Detokenize(ids, true), text, "long round trip");
            using (var s = t.Stream(true))
                Eq(string.Concat(ids.Select(s.Push)) + s.Flush(), text, "long stream");
        }
    }

    static void TokenizerErrors()
    {
        string tok = Env("QSP_TOK_GGUF");
        Tokenizer t;
        using (var f = new ModelFile(tok)) t = new Tokenizer(f);
        Eq(Ids(t.Tokenize("hello")), Ids(new[] { TokBos, TokHello }), "after the file's Dispose");
        t.Dispose();
        Throws<ObjectDisposedException>(() => t.Tokenize("x"), "disposed tokenizer");
        // the synthesized tiny model has tokenizer.ggml.model = "none"
        var e = Throws<QspException>(() => Tokenizer.FromGguf(Env("QSP_GGUF_MODEL")), "no tokenizer");
        Eq(e.Status, Status.Unsupported, "no tokenizer");
        Assert(e.LibraryMessage.Contains("none"), "message: " + e.LibraryMessage);
        Eq(Throws<QspException>(() => Tokenizer.FromGguf("/nonexistent/model.gguf"), "missing").Status, Status.IO, "missing");
        for (int k = 0; k < 3; ++k) Tokenizer.FromGguf(tok).Stream(); // forgotten: the finalizers free them
        GC.Collect();
        GC.WaitForPendingFinalizers();
    }
}
