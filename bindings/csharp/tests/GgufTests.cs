// Tests of the constants against qsp.h (issue 14) and of GGUF model files
// (issue 20), part of the bindings.csharp test program.
//
// Environment (set by bindings/CMakeLists.txt):
//   QSP_HEADER_DIR        the directory of qsp.h
//   QSP_GGUF_MODEL        `qsp synth --preset tiny --type q4_0`'s file
//   QSP_GGUF_TOKENS       the prompt of the references
//   QSP_GGUF_REF_LOGITS   its logits (bindings/gguf/gguf_ref.c; bit-identical to `qsp prefill`'s)
//   QSP_GGUF_REF_INFO     its qsp_gguf_info, "field value" lines
//   QSP_GGUF_REF_LAYOUT   sizeof/offsetof of qsp_gguf.h's structs
//   QSP_GGUF_BAD_DIR      bad_truncated.gguf, bad_magic.gguf, bad_type.gguf
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Text;
using System.Text.RegularExpressions;
using Qsp;

static partial class Tests
{
    // QSP_<prefix>_<NAME> (and QSP_OK as ERR "OK") of qsp.h: NAME -> value.
    static Dictionary<string, long> Header(string prefix)
    {
        var text = File.ReadAllText(Path.Combine(Env("QSP_HEADER_DIR"), "qsp.h"));
        var d = new Dictionary<string, long>();
        foreach (Match m in Regex.Matches(text, @"^#define\s+QSP_(\w+)\s+\(?\s*(-?\d+)\s*\)?", RegexOptions.Multiline))
        {
            string name = m.Groups[1].Value;
            long v = long.Parse(m.Groups[2].Value);
            if (prefix == "ERR" && name == "OK") d["OK"] = v;
            else if (name.StartsWith(prefix + "_")) d[name.Substring(prefix.Length + 1)] = v;
        }
        Assert(d.Count > 0, "no QSP_" + prefix + "_* in qsp.h");
        return d;
    }

    // "OutOfRange" -> "OUT_OF_RANGE", "DType" -> "DTYPE", "IO" -> "IO", "Q4_0" -> "Q4_0".
    static string UpperSnake(string s)
    {
        var b = new StringBuilder();
        for (int i = 0; i < s.Length; ++i)
        {
            if (i > 0 && char.IsUpper(s[i]) && char.IsLower(s[i - 1])) b.Append('_');
            b.Append(char.ToUpperInvariant(s[i]));
        }
        return b.ToString();
    }

    static void SameEnum(Type e, string prefix)
    {
        var want = Header(prefix);
        var have = new Dictionary<string, long>();
        foreach (var name in Enum.GetNames(e)) have[UpperSnake(name)] = Convert.ToInt64(Enum.Parse(e, name));
        Func<Dictionary<string, long>, string> Show =
            d => string.Join(", ", d.OrderBy(kv => kv.Key).Select(kv => kv.Key + "=" + kv.Value));
        Eq(Show(have), Show(want), e.Name + " vs QSP_" + prefix + "_* of qsp.h");
    }

    static void EnumsMatchHeader()
    {
        SameEnum(typeof(DType), "DTYPE");
        SameEnum(typeof(Status), "ERR");
        SameEnum(typeof(Backend), "BACKEND");
        SameEnum(typeof(RopeStyle), "ROPE");
    }

    static void LibraryNamesAndSizesEveryDType()
    {
        foreach (DType d in Enum.GetValues(typeof(DType)))
        {
            string name = Library.DTypeName(d);
            Eq(name.ToUpperInvariant(), d.ToString().ToUpperInvariant(), "qsp_dtype_name(" + (int)d + ")");
            Eq(ModelFile.TypeName((int)d), name, "qsp_gguf_type_name(" + (int)d + ")");
            Assert(Library.DTypeSize(d, 1, 256) > 0, "qsp_dtype_size(" + d + ", 1, 256)"); // 256: every block size divides it
        }
    }

    static void GgufStructLayoutMatchesC()
    {
        var want = new Dictionary<string, long>();
        foreach (var line in File.ReadAllLines(Env("QSP_GGUF_REF_LAYOUT")))
        {
            var parts = line.Split(' ');
            want[parts[0]] = long.Parse(parts[1]);
        }
        int n = 0;
        foreach (var t in new[] { typeof(NativeGguf.qsp_gguf_info), typeof(NativeGguf.qsp_gguf_tensor_desc) })
        {
            Eq((long)Marshal.SizeOf(t), want[t.Name], "sizeof " + t.Name);
            ++n;
            foreach (var f in t.GetFields(System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.Instance))
            {
                Eq(Marshal.OffsetOf(t, f.Name).ToInt64(), want[t.Name + "." + f.Name], "offsetof " + t.Name + "." + f.Name);
                ++n;
            }
        }
        Eq(n, want.Count, "fields checked");
    }

    static ExecOptions Cpu(int threads, uint contextLength = 0)
    {
        return new ExecOptions { Backend = Backend.Cpu, NThreads = threads, ContextLength = contextLength };
    }

    static int[] GgufTokens() { return Env("QSP_GGUF_TOKENS").Split(',').Select(int.Parse).ToArray(); }

    static void GgufInfoAndTensors()
    {
        var want = new Dictionary<string, string>();
        foreach (var line in File.ReadAllLines(Env("QSP_GGUF_REF_INFO")))
        {
            int sp = line.IndexOf(' ');
            want[line.Substring(0, sp)] = line.Substring(sp + 1);
        }
        var f = new ModelFile(Env("QSP_GGUF_MODEL"));
        using (f)
        {
            var i = f.Info();
            var got = new Dictionary<string, object>
            {
                {"version", i.Version}, {"file_size", i.FileSize}, {"tensor_count", i.TensorCount},
                {"kv_count", i.KvCount}, {"data_offset", i.DataOffset}, {"weight_bytes", i.WeightBytes},
                {"alignment", i.Alignment}, {"known_architecture", i.KnownArchitecture ? 1 : 0},
                {"architecture", i.Architecture}, {"name", i.Name}, {"n_layers", i.NLayers},
                {"hidden_size", i.HiddenSize}, {"intermediate_size", i.IntermediateSize}, {"n_heads", i.NHeads},
                {"n_kv_heads", i.NKvHeads}, {"head_dim", i.HeadDim}, {"vocab_size", i.VocabSize},
                {"context_length", i.ContextLength}, {"rope_style", i.RopeStyle}, {"qk_norm", i.QkNorm},
                {"tied_embeddings", i.TiedEmbeddings ? 1 : 0}, {"file_type", i.FileType},
            };
            foreach (var kv in got) Eq(kv.Value.ToString(), want[kv.Key], kv.Key);
            var ts = f.Tensors();
            Eq(ts.Count.ToString(), want["tensor_count"], "tensors");
            var t0 = ts[0];
            Eq(t0.Name, want["tensor0_name"], "tensor 0 name");
            Eq(t0.Type.ToString(), want["tensor0_type"], "tensor 0 type");
            Eq((DType)t0.Type, DType.Q4_0, "tensor 0 dtype");
            Eq(t0.TypeName, want["tensor0_type_name"], "tensor 0 type name");
            Eq(t0.NRows.ToString(), want["tensor0_n_rows"], "tensor 0 rows");
            Eq(t0.NCols.ToString(), want["tensor0_n_cols"], "tensor 0 cols");
            Eq(t0.NBytes.ToString(), want["tensor0_n_bytes"], "tensor 0 bytes");
            Eq(string.Join(",", t0.Shape), t0.NCols + "," + t0.NRows, "tensor 0 shape");
            Eq(f.Tensor(t0.Name).Offset, t0.Offset, "Tensor(name)");
            var e = Throws<QspException>(() => f.Tensor("no.such.tensor"), "missing tensor");
            Eq(e.Status, Status.OutOfRange, "missing tensor status");
            Eq(ts.Aggregate(0UL, (a, t) => a + t.NBytes), i.WeightBytes, "weight bytes");
        }
        Throws<ObjectDisposedException>(() => f.Info(), "disposed file");
    }

    static void GgufLogitsIdenticalToC()
    {
        var want = File.ReadAllBytes(Env("QSP_GGUF_REF_LOGITS"));
        var tokens = GgufTokens();
        using (var c = Context.FromGguf(Env("QSP_GGUF_MODEL"), Cpu(2)))
        {
            c.Prefill(tokens);
            Assert(Bytes(c.Logits()).SequenceEqual(want), "logits differ from the C reference");
        }
        // Through an open file, with a short context and progress reports.
        var seen = new List<ulong[]>();
        Context c2;
        using (var f = new ModelFile(Env("QSP_GGUF_MODEL")))
        {
            Eq(f.Params(Cpu(2, 64)).MaxSeqLen, 64u, "max_seq_len");
            c2 = f.CreateContext(Cpu(2, 64), (done, total) => seen.Add(new[] { done, total }));
        }
        using (c2)
        {
            c2.Prefill(tokens);
            Assert(Bytes(c2.Logits()).SequenceEqual(want), "logits (second context) differ from the C reference");
        }
        Assert(seen.Count > 0, "no progress reported");
        for (int k = 0; k < seen.Count; ++k)
            Assert(seen[k][1] == seen[0][1] && (k == 0 || seen[k][0] > seen[k - 1][0]), "progress increasing, one total");
        Eq(seen[seen.Count - 1][0], seen[0][1], "progress ends at the total");
    }

    // The model file split in two (ExecOptions' NDevices / DeviceMask reach
    // the context): the same logits bit for bit.
    static void GgufSplitContextIdenticalToC()
    {
        var want = File.ReadAllBytes(Env("QSP_GGUF_REF_LOGITS"));
        var tokens = GgufTokens();
        var opts = Cpu(2);
        opts.NDevices = 2;
        opts.DeviceMask = 1;
        using (var f = new ModelFile(Env("QSP_GGUF_MODEL")))
        {
            var p = f.Params(Cpu(2));
            Eq(p.NDevices, 0u, "default NDevices");
            Eq(p.DeviceMask, 0u, "default DeviceMask");
            p = f.Params(opts);
            Eq(p.NDevices, 2u, "NDevices");
            Eq(p.DeviceMask, 1u, "DeviceMask");
            using (var c = f.CreateContext(opts))
            {
                Assert(c.Info().DeviceName.Contains("2 shards"), "device name " + c.Info().DeviceName);
                c.Prefill(tokens);
                Assert(Bytes(c.Logits()).SequenceEqual(want), "split logits differ from the C reference");
            }
        }
        opts.DeviceMask = 0;
        using (var c = Context.FromGguf(Env("QSP_GGUF_MODEL"), opts))
        {
            c.Prefill(tokens);
            Assert(Bytes(c.Logits()).SequenceEqual(want), "split logits (FromGguf) differ from the C reference");
        }
    }

    static void GgufBadFiles()
    {
        var dir = Env("QSP_GGUF_BAD_DIR");
        var cases = new[] {
            Tuple.Create("missing.gguf", Status.IO, "missing.gguf"),
            Tuple.Create("bad_truncated.gguf", Status.BadFormat, ""),
            Tuple.Create("bad_magic.gguf", Status.BadFormat, ""),
            Tuple.Create("bad_type.gguf", Status.Unsupported, "iq4_nl"),
        };
        foreach (var c in cases)
        {
            var e = Throws<QspException>(() => Context.FromGguf(Path.Combine(dir, c.Item1), Cpu(1)), c.Item1);
            Eq(e.Status, c.Item2, c.Item1 + " status (" + e.Message + ")");
            Assert(e.LibraryMessage.Length > 0 && e.LibraryMessage.Contains(c.Item3), c.Item1 + ": " + e.Message);
        }
    }

    class Stop : Exception { public Stop(string m) : base(m) { } }

    static void GgufThrowingProgressIsRethrownAndLeavesNothing()
    {
        ulong baseline = CachedTensors();
        using (var f = new ModelFile(Env("QSP_GGUF_MODEL")))
        {
            for (int k = 0; k < 3; ++k)
            {
                int calls = 0;
                var e = Throws<Stop>(() => f.CreateContext(Cpu(1), (done, total) =>
                {
                    if (++calls == 2) throw new Stop("enough after " + done + " of " + total + " bytes");
                }), "the callback's exception");
                Assert(e.Message.StartsWith("enough after"), e.Message);
                Assert(e.StackTrace.Contains("GgufThrowingProgress"), "the stack trace of the throw is kept: " + e.StackTrace);
                Eq(calls, 2, "calls (none after the throw)");
                Eq(CachedTensors(), baseline, "tensors after the throw (the half-made context is disposed)");
            }
        }
    }

    static int Mappings(string path)
    {
        var full = Path.GetFullPath(path);
        return File.ReadAllLines("/proc/self/maps").Count(l => l.EndsWith(full));
    }

    static void GgufFilesAndContextsLeakNothing()
    {
        ulong baseline = CachedTensors();
        string path = Env("QSP_GGUF_MODEL");
        var tokens = GgufTokens().Take(2).ToArray();
        Action<bool> cycle = dispose =>
        {
            var f = new ModelFile(path);
            Assert(Mappings(path) > 0, "the open file is in /proc/self/maps");
            var c = f.CreateContext(Cpu(1, 16), (d, t) => { });
            c.Prefill(tokens);
            if (dispose)
            {
                c.Dispose();
                f.Dispose();
            }
        };
        for (int i = 0; i < 10; ++i) cycle(true);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        long rss0 = Rss();
        for (int i = 0; i < 100; ++i) cycle(true);
        Eq(CachedTensors(), baseline, "tensors after disposing every context");
        Eq(Mappings(path), 0, "mappings after disposing every file");
        long grown = Rss() - rss0;
        Assert(grown < 8 << 20, "RSS grew by " + grown + " bytes over 100 files and contexts");

        for (int i = 0; i < 30; ++i) cycle(false); // left to the finalizers
        for (int i = 0; i < 20 && (CachedTensors() != baseline || Mappings(path) != 0); ++i)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }
        Eq(CachedTensors(), baseline, "tensors after the finalizers ran");
        Eq(Mappings(path), 0, "mappings after the finalizers ran");
    }
}
