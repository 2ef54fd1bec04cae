// Tests of the C# binding (run by ctest as bindings.csharp): a small runner
// that prints one line per test and "N passed, N failed" at the end; the exit
// code is the number of failures.
//
// Environment (set by bindings/CMakeLists.txt):
//   LD_LIBRARY_PATH       starts with the directory of the libqsp.so.1 under test
//   QSP_REF_LOGITS        logits written by bindings/common/ref_logits.c
//   QSP_REF_LAYOUT        sizeof/offsetof of the public structs, from the same program
//   QSP_FAKE_ABI_DIR      a directory with a stub libqsp.so.1 that reports ABI version 2
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Runtime.InteropServices;
using Qsp;

static class TinyModel
{
    public const ulong Base = 0x5153500000000000UL;
    public static readonly int[] Tokens = { 1, 7, 42, 100, 255, 0, 128, 64, 3, 200 };
    public const ulong NTensors = 2 * 11 + 3;

    public static ContextParams Params()
    {
        return new ContextParams
        {
            NLayers = 2, HiddenSize = 64, IntermediateSize = 128, NHeads = 4, NKvHeads = 2, HeadDim = 16,
            VocabSize = 256, MaxSeqLen = 32, Backend = Backend.Cpu, NThreads = 2,
        };
    }

    // One tensor of tiny-v1 (bindings/common/MODEL.md).
    public static Tensor Gen(ulong handle, DType dt, ulong rows, ulong cols)
    {
        ulong s = unchecked(handle * 0x9E3779B97F4A7C15UL);
        Func<ulong> next = () => { ulong x = s; x ^= x << 13; x ^= x >> 7; x ^= x << 17; s = x; return x; };
        var b = new List<byte>();
        Action<ulong, int> put = (v, n) => { for (int i = 0; i < n; ++i) b.Add((byte)(v >> (8 * i))); };
        if (dt == DType.F32)
        {
            for (ulong i = 0; i < rows * cols; ++i) put(0x3F000000UL | (next() >> 41), 4);
        }
        else if (dt == DType.Q8_0)
        {
            for (ulong i = 0; i < rows * cols / 32; ++i)
            {
                put(0x1400UL | (next() & 0x3FF), 2);
                for (int k = 0; k < 4; ++k) put(next(), 8);
            }
        }
        else if (dt == DType.Q4_0)
        {
            for (ulong i = 0; i < rows * cols / 32; ++i)
            {
                put(0x2000UL | (next() & 0x3FF), 2);
                for (int k = 0; k < 2; ++k) put(next(), 8);
            }
        }
        else throw new ArgumentException("dtype");
        if ((ulong)b.Count != Library.DTypeSize(dt, rows, cols)) throw new Exception("size");
        return new Tensor(handle, dt, rows, cols, b.ToArray());
    }

    public static readonly LayerWeights[] Layers = MakeLayers();
    public static readonly Tensor Embd = Gen(Base + 1, DType.Q8_0, 256, 64);
    public static readonly Tensor Norm = Gen(Base + 2, DType.F32, 1, 64);
    public static readonly Tensor Head = Gen(Base + 3, DType.Q4_0, 256, 64);

    static LayerWeights[] MakeLayers()
    {
        const ulong h = 64, f = 128, d = 16, q = 64, kv = 32;
        var ls = new LayerWeights[2];
        for (ulong l = 0; l < 2; ++l)
        {
            DType wt = l % 2 == 0 ? DType.Q4_0 : DType.Q8_0;
            ulong b = Base + 0x100 * (l + 1);
            ls[l] = new LayerWeights
            {
                AttnNorm = Gen(b + 0, DType.F32, 1, h), Wq = Gen(b + 1, wt, q, h), Wk = Gen(b + 2, wt, kv, h),
                Wv = Gen(b + 3, wt, kv, h), QNorm = Gen(b + 4, DType.F32, 1, d), KNorm = Gen(b + 5, DType.F32, 1, d),
                Wo = Gen(b + 6, wt, h, q), FfnNorm = Gen(b + 7, DType.F32, 1, h), WGate = Gen(b + 8, wt, f, h),
                WUp = Gen(b + 9, wt, f, h), WDown = Gen(b + 10, wt, h, f),
            };
        }
        return ls;
    }

    public static Context Create() { return Create(Params()); }

    public static Context Create(ContextParams p)
    {
        var c = new Context(p);
        try
        {
            for (uint l = 0; l < Layers.Length; ++l) c.UploadLayer(l, Layers[l]);
            c.UploadEmbedding(Embd);
            c.UploadOutput(Norm, Head);
        }
        catch
        {
            c.Dispose();
            throw;
        }
        return c;
    }
}

static partial class Tests
{
    static int passed, failed, skipped;

    class Skip : Exception { public Skip(string m) : base(m) { } }

    static void Assert(bool cond, string what)
    {
        if (!cond) throw new Exception("assertion failed: " + what);
    }

    static void Eq<T>(T a, T b, string what)
    {
        if (!EqualityComparer<T>.Default.Equals(a, b))
            throw new Exception(string.Format("{0}: got {1}, want {2}", what, a, b));
    }

    static string Env(string name)
    {
        string v = Environment.GetEnvironmentVariable(name);
        if (string.IsNullOrEmpty(v)) throw new Skip(name + " is not set (ctest sets it)");
        return v;
    }

    static T Throws<T>(Action a, string what) where T : Exception
    {
        try { a(); }
        catch (T e) { return e; }
        throw new Exception(what + ": no " + typeof(T).Name);
    }

    static byte[] Bytes(float[] v)
    {
        var b = new byte[v.Length * 4];
        Buffer.BlockCopy(v, 0, b, 0, b.Length);
        if (!BitConverter.IsLittleEndian) throw new Skip("big-endian host");
        return b;
    }

    static bool Same(byte[] a, byte[] b)
    {
        if (a.Length != b.Length) return false;
        for (int i = 0; i < a.Length; ++i) if (a[i] != b[i]) return false;
        return true;
    }

    static void Versions()
    {
        Library.CheckAbi();
        Eq(Library.Abi, Native.AbiVersion, "abi");
        Eq(Library.Version.Split('.').Length, 3, "version parts");
        Eq(Library.StatusString(Status.OutOfRange), "out of range", "status string");
        Eq(Library.DTypeName(DType.Q4_0), "q4_0", "dtype name");
        Eq(Library.DTypeSize(DType.Q8_0, 2, 64), 2UL * 2 * 34, "dtype size");
        Assert(Library.BackendAvailable(Backend.Cpu), "CPU backend");
        for (int c = -20; c <= 0; ++c)  // the binding's copy of the descriptions is the library's
            Eq(QspException.Describe((Status)c), Library.StatusString((Status)c), "status " + c);
        var p = new ContextParams();
        Eq(p.RopeTheta, 1e6f, "default rope_theta");
        Assert(p.QkNorm, "default qk_norm");
    }

    static void StructLayoutMatchesC()
    {
        var want = new Dictionary<string, long>();
        foreach (var line in File.ReadAllLines(Env("QSP_REF_LAYOUT")))
        {
            var parts = line.Split(' ');
            want[parts[0]] = long.Parse(parts[1]);
        }
        var types = new[] {
            typeof(Native.qsp_context_params), typeof(Native.qsp_context_info), typeof(Native.qsp_tensor),
            typeof(Native.qsp_layer_weights), typeof(Native.qsp_output_weights), typeof(Native.qsp_cache_stats),
            typeof(Native.qsp_batch_seq) };
        int n = 0;
        foreach (var t in types)
        {
            Eq((long)Marshal.SizeOf(t), want[t.Name], "sizeof " + t.Name);
            ++n;
            foreach (var f in t.GetFields(System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.Instance))
            {
                Eq(Marshal.OffsetOf(t, f.Name).ToInt64(), want[t.Name + "." + f.Name], "offsetof " + t.Name + "." + f.Name);
                ++n;
            }
        }
        Eq(n, want.Count, "fields checked (the C program lists fields this mirror lacks)");
    }

    static void LogitsBitExact()
    {
        var reference = File.ReadAllBytes(Env("QSP_REF_LOGITS"));
        using (var c = TinyModel.Create())
        {
            var info = c.Info();
            Eq(info.Backend, Backend.Cpu, "backend");
            Eq(info.NThreads, 2, "threads");
            Assert(info.DeviceName.Length > 0, "device name");
            c.Prefill(TinyModel.Tokens);
            Eq(c.KvLength, (uint)TinyModel.Tokens.Length, "kv length");
            var logits = c.Logits();
            Eq(logits.Length, 256, "vocab");
            Assert(Same(Bytes(logits), reference), "logits identical to the C API's");
            uint n;
            IntPtr p = c.LogitsPointer(out n);
            var view = new float[n];
            Marshal.Copy(p, view, 0, (int)n);
            Assert(Same(Bytes(view), reference), "borrowed logits identical");
            var dst = new float[300];
            c.CopyLogits(dst);
            Assert(dst[255] == logits[255], "CopyLogits");
            int best = 0;
            for (int i = 1; i < logits.Length; ++i) if (logits[i] > logits[best]) best = i;
            Eq(c.GreedyToken(), best, "greedy token");

            c.KvTruncate(4);
            Eq(Throws<QspException>(() => c.Logits(), "logits after truncate").Status, Status.NotReady, "not ready");
            var rest = new int[TinyModel.Tokens.Length - 4];
            Array.Copy(TinyModel.Tokens, 4, rest, 0, rest.Length);
            c.Prefill(rest);
            Assert(Same(Bytes(c.Logits()), reference), "chunked prefill identical");
            c.KvClear();
            Eq(c.KvLength, 0u, "cleared");
        }
    }

    static void ErrorsCarryStatusAndMessage()
    {
        using (var c = TinyModel.Create())
        {
            var e = Throws<QspException>(() => c.UploadLayer(5, TinyModel.Layers[0]), "layer 5");
            Eq(e.Status, Status.OutOfRange, "status");
            Eq(e.LibraryMessage, "layer 5 out of range (the model has 2 layers)", "message");
            Eq(e.LibraryMessage, c.LastError, "last error");
            Assert(e.Message.Contains("out of range") && e.Message.Contains("layer 5"), "Message: " + e.Message);

            e = Throws<QspException>(() => c.Prefill(new[] { 1, 256 }), "bad token");
            Eq(e.Status, Status.OutOfRange, "bad token status");
            Assert(e.LibraryMessage.Contains("256"), "bad token message: " + e.LibraryMessage);
            Eq(c.KvLength, 0u, "a failed prefill changes nothing");
            Eq(Throws<QspException>(() => c.Prefill(new int[0]), "empty").Status, Status.InvalidArgument, "empty prefill");

            var n = TinyModel.Norm;
            var shortData = new byte[n.Data.Length - 4];
            Array.Copy(n.Data, shortData, shortData.Length);
            e = Throws<QspException>(() => c.UploadOutput(new Tensor(n.Handle, DType.F32, 1, 64, shortData), TinyModel.Head), "short");
            Eq(e.Status, Status.DType, "short tensor");
            Assert(e.LibraryMessage.Contains("output_norm"), "short tensor message: " + e.LibraryMessage);
            Eq(Throws<QspException>(() => c.PrefillEmbeddings(new float[65]), "ragged").Status, Status.InvalidArgument, "ragged");
        }
        var p = TinyModel.Params();
        p.NLayers = 0;
        var ge = Throws<QspException>(() => new Context(p), "n_layers 0");
        Eq(ge.Status, Status.Shape, "global status");
        Eq(ge.LibraryMessage, "n_layers must be > 0", "global message");
        Eq(Throws<QspException>(() => Library.GetCacheStats(Backend.Auto, 0), "stats").Status, Status.InvalidArgument, "stats");

        var d = new Context(TinyModel.Params());
        d.Dispose();
        d.Dispose();
        Throws<ObjectDisposedException>(() => d.Prefill(TinyModel.Tokens), "disposed");
    }

    // ---- tensor parallelism (NDevices / DeviceMask, libqsp >= 1.3) ----
    // tiny-v1 splits in two (2 KV heads, 128 FFN features; 32 columns of wo
    // and 64 of w_down per shard: whole blocks). The CPU runs the shards one
    // after another: logits bit for bit the unsplit model's.

    static ContextParams Split(uint nDevices, uint deviceMask)
    {
        var p = TinyModel.Params();
        p.NDevices = nDevices;
        p.DeviceMask = deviceMask;
        return p;
    }

    static void SplitParamsDefaultToUnsplit()
    {
        var p = new ContextParams();
        Eq(p.NDevices, 0u, "default NDevices");
        Eq(p.DeviceMask, 0u, "default DeviceMask");
        p = Split(2, 1);
        Eq(p.NDevices, 2u, "NDevices");
        Eq(p.DeviceMask, 1u, "DeviceMask");
    }

    static void SplitInTwoIsBitIdentical()
    {
        var reference = File.ReadAllBytes(Env("QSP_REF_LOGITS"));
        using (var whole = TinyModel.Create())
        {
            whole.Prefill(TinyModel.Tokens);
            var want = Bytes(whole.Logits());
            Assert(Same(want, reference), "unsplit logits identical to the C API's");
            // DeviceMask 0 (devices from DeviceIndex on) and one bit (every
            // shard on that device): both reach the library, which says how
            // many shards.
            foreach (uint mask in new[] { 0u, 1u })
                using (var c = TinyModel.Create(Split(2, mask)))
                {
                    var info = c.Info();
                    Assert(info.DeviceName.Contains("2 shards"), "mask " + mask + ": device name " + info.DeviceName);
                    Eq(info.KvCacheBytes, whole.Info().KvCacheBytes, "mask " + mask + ": kv cache bytes");
                    c.Prefill(TinyModel.Tokens);
                    Assert(Same(Bytes(c.Logits()), want), "mask " + mask + ": logits identical to the unsplit model's");
                    Eq(c.GreedyToken(), whole.GreedyToken(), "mask " + mask + ": greedy token");
                }
        }
    }

    static void SplitThatDoesNotDivideIsRefused()
    {
        // 2 KV heads over 3 shards.
        var e = Throws<QspException>(() => new Context(Split(3, 0)), "3 shards");
        Eq(e.Status, Status.Shape, "3 shards: status");
        Assert(e.LibraryMessage.Contains("n_kv_heads 2 does not divide over n_devices = 3"), "3 shards: " + e.Message);
        // A DeviceMask naming 3 devices for 2 shards.
        e = Throws<QspException>(() => new Context(Split(2, 7)), "mask 0x7");
        Eq(e.Status, Status.InvalidArgument, "mask 0x7: status");
        Assert(e.LibraryMessage.Contains("device_mask 0x7"), "mask 0x7: " + e.Message);
    }

    static long Rss()
    {
        var f = File.ReadAllText("/proc/self/statm").Split(' ');
        return long.Parse(f[1]) * Environment.SystemPageSize;
    }

    static ulong CachedTensors() { return Library.GetCacheStats(Backend.Cpu, 0).NTensors; }

    static void DisposingContextsLeaksNothing()
    {
        ulong baseline = CachedTensors();
        Action cycle = () =>
        {
            using (var c = TinyModel.Create())
            {
                c.Prefill(new[] { 1, 2, 3 });
                c.Logits();
                Eq(CachedTensors(), baseline + TinyModel.NTensors, "tensors with a context alive");
            }
        };
        for (int i = 0; i < 20; ++i) cycle();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        long rss0 = Rss();
        for (int i = 0; i < 200; ++i) cycle();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        Eq(CachedTensors(), baseline, "tensors after disposing every context");
        long grown = Rss() - rss0;
        Assert(grown < 8 << 20, "RSS grew by " + grown + " bytes over 200 contexts");
    }

    static void MakeGarbage(int n)
    {
        for (int i = 0; i < n; ++i)
        {
            var c = TinyModel.Create();
            c.Prefill(new[] { 1, 2 });
        }
    }

    static void FinalizerFreesForgottenContexts()
    {
        ulong baseline = CachedTensors();
        MakeGarbage(50);
        for (int i = 0; i < 20 && CachedTensors() != baseline; ++i)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }
        Eq(CachedTensors(), baseline, "tensors after the finalizers ran");
    }

    static void AbiMismatchIsRefused()
    {
        var fakeDir = Env("QSP_FAKE_ABI_DIR");
        var exe = System.Reflection.Assembly.GetExecutingAssembly().Location;
        var psi = new ProcessStartInfo("mono", "\"" + exe + "\" --abi-child")
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        psi.EnvironmentVariables["LD_LIBRARY_PATH"] = fakeDir + ":" + Environment.GetEnvironmentVariable("LD_LIBRARY_PATH");
        using (var proc = Process.Start(psi))
        {
            string output = proc.StandardOutput.ReadToEnd() + proc.StandardError.ReadToEnd();
            proc.WaitForExit();
            Eq(proc.ExitCode, 0, "child exit code (" + output + ")");
            Assert(output.Contains("ABI-CHILD: QspAbiException: unsupported (-13): ABI mismatch: the loaded libqsp has " +
                                   "ABI version 2, but this C# binding was written for ABI version 1"), "child said: " + output);
        }
    }

    static int AbiChild()
    {
        try
        {
            new Context(new ContextParams { NLayers = 2, HiddenSize = 64, IntermediateSize = 128, NHeads = 4, NKvHeads = 2,
                                            HeadDim = 16, VocabSize = 256, MaxSeqLen = 32, Backend = Backend.Cpu });
            Console.WriteLine("ABI-CHILD: no exception");
            return 1;
        }
        catch (QspAbiException e)
        {
            Console.WriteLine("ABI-CHILD: QspAbiException: " + e.Message);
            return e.Status == Status.Unsupported && e.LibraryAbi == 2 ? 0 : 1;
        }
    }

    static void Run(string name, Action test)
    {
        try
        {
            test();
            ++passed;
            Console.WriteLine("PASS " + name);
        }
        catch (Skip s)
        {
            ++skipped;
            Console.WriteLine("SKIP " + name + ": " + s.Message);
        }
        catch (Exception e)
        {
            ++failed;
            Console.WriteLine("FAIL " + name + ": " + e);
        }
    }

    static int Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "--abi-child") return AbiChild();
        Run("Versions", Versions);
        Run("StructLayoutMatchesC", StructLayoutMatchesC);
        Run("LogitsBitExact", LogitsBitExact);
        Run("ErrorsCarryStatusAndMessage", ErrorsCarryStatusAndMessage);
        Run("SplitParamsDefaultToUnsplit", SplitParamsDefaultToUnsplit);
        Run("SplitInTwoIsBitIdentical", SplitInTwoIsBitIdentical);
        Run("SplitThatDoesNotDivideIsRefused", SplitThatDoesNotDivideIsRefused);
        Run("DisposingContextsLeaksNothing", DisposingContextsLeaksNothing);
        Run("FinalizerFreesForgottenContexts", FinalizerFreesForgottenContexts);
        Run("AbiMismatchIsRefused", AbiMismatchIsRefused);
        Run("EnumsMatchHeader", EnumsMatchHeader);
        Run("LibraryNamesAndSizesEveryDType", LibraryNamesAndSizesEveryDType);
        Run("PrefillBatchEqualsSinglePrefills", PrefillBatchEqualsSinglePrefills);
        Run("PrefillBatchInvalidChangesNothing", PrefillBatchInvalidChangesNothing);
        Run("PrefillBatchServingLoopExample", PrefillBatchServingLoopExample);
        Run("GgufStructLayoutMatchesC", GgufStructLayoutMatchesC);
        Run("GgufInfoAndTensors", GgufInfoAndTensors);
        Run("GgufLogitsIdenticalToC", GgufLogitsIdenticalToC);
        Run("GgufSplitContextIdenticalToC", GgufSplitContextIdenticalToC);
        Run("GgufBadFiles", GgufBadFiles);
        Run("GgufThrowingProgressIsRethrownAndLeavesNothing", GgufThrowingProgressIsRethrownAndLeavesNothing);
        Run("GgufFilesAndContextsLeakNothing", GgufFilesAndContextsLeakNothing);
        Run("TokenizerInfoAndRoundTrip", TokenizerInfoAndRoundTrip);
        Run("TokenizerSpecial", TokenizerSpecial);
        Run("TokenizerStreamHoldsBackSplitCharacter", TokenizerStreamHoldsBackSplitCharacter);
        Run("TokenizerLongTextGrowsBuffers", TokenizerLongTextGrowsBuffers);
        Run("TokenizerErrors", TokenizerErrors);
        Console.WriteLine(skipped > 0 ? string.Format("{0} passed, {1} failed, {2} skipped", passed, failed, skipped)
                                      : string.Format("{0} passed, {1} failed", passed, failed));
        return failed;
    }
}
