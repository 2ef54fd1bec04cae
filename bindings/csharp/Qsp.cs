// C# bindings to libqsp (include/qsp/qsp.h) through P/Invoke.
//
// * Qsp.Native mirrors the header: blittable [StructLayout(Sequential)]
//   structs of fixed-width fields (the tests check Marshal.SizeOf/OffsetOf
//   against what the C compiler says) and the functions, with every returned
//   `const char*` taken as an IntPtr (the strings are static or borrowed: the
//   marshaller must not free them).
// * Qsp.Context owns the qsp_context through a SafeHandle (ContextHandle):
//   Dispose() frees it, the finalizer is the safety net, and no call can race
//   a release. Calls on one Context are serialized with a lock.
// * Failing calls throw QspException with the library's Status and message.
// * The library is libqsp.so.1, found by the dynamic loader (LD_LIBRARY_PATH,
//   the ldconfig cache). Its ABI version is checked when the binding first
//   touches the library: every entry point then throws QspAbiException on a
//   mismatch (DllNotFoundException when it is missing).
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;
using Microsoft.Win32.SafeHandles;

namespace Qsp
{
    /// <summary>The library's status codes (QSP_OK, QSP_ERR_*).</summary>
    public enum Status : int
    {
        Ok = 0,
        InvalidArgument = -1,
        StructSize = -2,
        Shape = -3,
        DType = -4,
        OutOfRange = -5,
        NotReady = -6,
        ContextFull = -7,
        HandleConflict = -8,
        NoDevice = -9,
        OutOfMemory = -10,
        DeviceOutOfMemory = -11,
        Device = -12,
        Unsupported = -13,
        Internal = -14,
        IO = -15,
        BadFormat = -16,
        BufferTooSmall = -17,
    }

    /// <summary>Tensor element types (GGML type ids), one per QSP_DTYPE_* of
    /// qsp.h (the tests check that against the header).</summary>
    public enum DType : int
    {
        F32 = 0,
        F16 = 1,
        Q4_0 = 2,
        Q8_0 = 8,
        BF16 = 30,
        Q4_1 = 3,
        Q5_0 = 6,
        Q5_1 = 7,
        Q2_K = 10,
        Q3_K = 11,
        Q4_K = 12,
        Q5_K = 13,
        Q6_K = 14,
    }

    /// <summary>Execution backends.</summary>
    public enum Backend : int { Auto = 0, Cpu = 1, Cuda = 2 }

    /// <summary>RoPE pairing.</summary>
    public enum RopeStyle : int { Neox = 0, Interleaved = 1 }

    /// <summary>A failed qsp call: the status and the library's message.</summary>
    public class QspException : Exception
    {
        public Status Status { get; private set; }
        public string LibraryMessage { get; private set; }

        public QspException(Status status, string message)
            : base(string.Format("{0} ({1}): {2}", Describe(status), (int)status, message))
        {
            Status = status;
            LibraryMessage = message;
        }

        /// <summary>The library's description of a status (qsp_status_string),
        /// from this binding's copy: formatting an error never calls into the
        /// library (which may be of another ABI). The tests check the copy.</summary>
        public static string Describe(Status s)
        {
            switch (s)
            {
                case Status.Ok: return "ok";
                case Status.InvalidArgument: return "invalid argument";
                case Status.StructSize: return "wrong struct_size";
                case Status.Shape: return "shape mismatch";
                case Status.DType: return "wrong dtype or byte size";
                case Status.OutOfRange: return "out of range";
                case Status.NotReady: return "not ready";
                case Status.ContextFull: return "context full";
                case Status.HandleConflict: return "handle conflict";
                case Status.NoDevice: return "no CUDA device";
                case Status.OutOfMemory: return "out of host memory";
                case Status.DeviceOutOfMemory: return "out of device memory";
                case Status.Device: return "device error";
                case Status.Unsupported: return "unsupported";
                case Status.Internal: return "internal error";
                case Status.IO: return "I/O error";
                case Status.BadFormat: return "bad file format";
                case Status.BufferTooSmall: return "buffer too small";
                default: return "unknown status";
            }
        }
    }

    /// <summary>The loaded libqsp's ABI version is not the one this binding speaks.</summary>
    public sealed class QspAbiException : QspException
    {
        public uint LibraryAbi { get; private set; }

        public QspAbiException(uint abi)
            : base(Status.Unsupported, string.Format(
                "ABI mismatch: the loaded libqsp has ABI version {0}, but this C# binding was written for ABI version {1}; " +
                "use libqsp.so.{1} or a binding for ABI {0}", abi, Native.AbiVersion))
        {
            LibraryAbi = abi;
        }
    }

    /// <summary>The raw C API. Structs and functions exactly as in qsp.h.</summary>
    public static class Native
    {
        public const string Lib = "libqsp.so.1";
        /// <summary>The ABI major version this binding was written for.</summary>
        public const uint AbiVersion = 1;

        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_context_params
        {
            public uint struct_size;
            public uint n_layers;
            public uint hidden_size;
            public uint intermediate_size;
            public uint n_heads;
            public uint n_kv_heads;
            public uint head_dim;
            public uint vocab_size;
            public uint max_seq_len;
            public float rms_eps;
            public float rope_theta;
            public int rope_style;
            public int qk_norm;
            public int backend;
            public int device_index;
            public int n_threads;
            public uint reserved0;
            public uint reserved2;
            public IntPtr log_callback;   // qsp_log_callback; not exposed (IntPtr.Zero)
            public IntPtr log_user_data;
            public int log_level;
            public uint reserved1;
        }

        [StructLayout(LayoutKind.Sequential)]
        public unsafe struct qsp_context_info
        {
            public uint struct_size;
            public int backend;
            public int device_index;
            public int n_threads;
            public fixed byte device_name[128];
            public ulong kv_cache_bytes;
            public ulong scratch_bytes;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_tensor
        {
            public ulong handle;
            public int dtype;
            public uint reserved;
            public ulong n_rows;
            public ulong n_cols;
            public IntPtr data;
            public ulong n_bytes;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_layer_weights
        {
            public uint struct_size;
            public uint reserved;
            public qsp_tensor attn_norm;
            public qsp_tensor wq, wk, wv;
            public qsp_tensor q_norm, k_norm;
            public qsp_tensor wo;
            public qsp_tensor ffn_norm;
            public qsp_tensor w_gate, w_up, w_down;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_output_weights
        {
            public uint struct_size;
            public uint reserved;
            public qsp_tensor norm;
            public qsp_tensor lm_head;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_cache_stats
        {
            public uint struct_size;
            public uint reserved;
            public ulong n_tensors;
            public ulong n_bytes;
            public ulong n_uploads;
            public ulong n_hits;
        }

        /// <summary>One piece of qsp_prefill_batch (since 1.1).</summary>
        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_batch_seq
        {
            public IntPtr ctx;          // qsp_context*
            public IntPtr tokens;       // const int32_t*, or zero
            public IntPtr embeddings;   // const float*, or zero
            public uint n_tokens;
            public uint flags;
        }

        /// <summary>The first library version with qsp_prefill_batch (1.1.0).</summary>
        public const uint PrefillBatchVersion = 10100;

        // ---- loading -------------------------------------------------------
        static readonly Exception loadError;

        static Native()
        {
            uint abi;
            try
            {
                abi = qsp_abi_version();
            }
            catch (Exception e)
            {
                loadError = new DllNotFoundException("qsp: cannot load " + Lib + " (put its directory on " +
                                                     "LD_LIBRARY_PATH, or install it): " + e.Message, e);
                return;
            }
            if (abi != AbiVersion) loadError = new QspAbiException(abi);
        }

        /// <summary>Throws QspAbiException when the loaded library is another
        /// ABI, DllNotFoundException when it could not be loaded.</summary>
        public static void CheckAbi()
        {
            if (loadError != null) throw loadError;
        }

        internal static string Str(IntPtr p)
        {
            return p == IntPtr.Zero ? "" : Marshal.PtrToStringAnsi(p);
        }

        internal static string StatusString(Status s) { return Str(qsp_status_string((int)s)); }

        /// <summary>Throws for a failed global call; its message is this thread's.</summary>
        internal static void CheckGlobal(int st)
        {
            if (st != 0) throw new QspException((Status)st, Str(qsp_last_error()));
        }

        // ---- functions ----------------------------------------------------------
        [DllImport(Lib)] public static extern IntPtr qsp_version_string();
        [DllImport(Lib)] public static extern uint qsp_version_number();
        [DllImport(Lib)] public static extern uint qsp_abi_version();
        [DllImport(Lib)] public static extern IntPtr qsp_status_string(int status);
        [DllImport(Lib)] public static extern IntPtr qsp_last_error();
        [DllImport(Lib)] public static extern void qsp_set_log_callback(IntPtr callback, IntPtr user_data, int max_level);
        [DllImport(Lib)] public static extern ulong qsp_dtype_size(int dtype, ulong n_rows, ulong n_cols);
        [DllImport(Lib)] public static extern IntPtr qsp_dtype_name(int dtype);
        [DllImport(Lib)] public static extern int qsp_backend_available(int backend);
        [DllImport(Lib)] public static extern void qsp_context_params_init(ref qsp_context_params p);
        [DllImport(Lib)] public static extern int qsp_context_create(ref qsp_context_params p, out ContextHandle ctx);
        [DllImport(Lib)] public static extern void qsp_context_destroy(IntPtr ctx);
        [DllImport(Lib)] public static extern IntPtr qsp_context_last_error(ContextHandle ctx);
        [DllImport(Lib)] public static extern void qsp_context_info_init(ref qsp_context_info info);
        [DllImport(Lib)] public static extern int qsp_context_get_info(ContextHandle ctx, ref qsp_context_info info);
        [DllImport(Lib)] public static extern void qsp_layer_weights_init(ref qsp_layer_weights w);
        [DllImport(Lib)] public static extern int qsp_upload_layer(ContextHandle ctx, uint layer, ref qsp_layer_weights w);
        [DllImport(Lib)] public static extern int qsp_upload_embedding(ContextHandle ctx, ref qsp_tensor t);
        [DllImport(Lib)] public static extern void qsp_output_weights_init(ref qsp_output_weights w);
        [DllImport(Lib)] public static extern int qsp_upload_output(ContextHandle ctx, ref qsp_output_weights w);
        [DllImport(Lib)] public static extern void qsp_cache_stats_init(ref qsp_cache_stats s);
        [DllImport(Lib)] public static extern int qsp_cache_stats_get(int backend, int device_index, ref qsp_cache_stats s);
        [DllImport(Lib)] public static extern int qsp_prefill(ContextHandle ctx, int[] tokens, uint n_tokens);
        [DllImport(Lib)] public static extern int qsp_prefill_embeddings(ContextHandle ctx, float[] hidden, uint n_tokens);
        // Since 1.1: resolved at the first call (Context.PrefillBatch checks the version first).
        [DllImport(Lib)] public static extern int qsp_prefill_batch([In] qsp_batch_seq[] seqs, uint n_seqs, uint seq_size);
        [DllImport(Lib)] public static extern int qsp_get_logits(ContextHandle ctx, out IntPtr logits, out uint n_vocab);
        [DllImport(Lib)] public static extern int qsp_copy_logits(ContextHandle ctx, [Out] float[] dst, ulong capacity);
        [DllImport(Lib)] public static extern int qsp_greedy_token(ContextHandle ctx, out int token);
        [DllImport(Lib)] public static extern int qsp_kv_length(ContextHandle ctx, out uint length);
        [DllImport(Lib)] public static extern int qsp_kv_clear(ContextHandle ctx);
        [DllImport(Lib)] public static extern int qsp_kv_truncate(ContextHandle ctx, uint length);
    }

    /// <summary>Owns a qsp_context*; releasing it calls qsp_context_destroy.</summary>
    public sealed class ContextHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public ContextHandle() : base(true) { }

        protected override bool ReleaseHandle()
        {
            Native.qsp_context_destroy(handle);
            return true;
        }
    }

    /// <summary>Library-wide helpers.</summary>
    public static class Library
    {
        /// <summary>The loaded library's version, e.g. "1.0.0".</summary>
        public static string Version { get { return Native.Str(Native.qsp_version_string()); } }
        /// <summary>The loaded library's ABI major version.</summary>
        public static uint Abi { get { return Native.qsp_abi_version(); } }
        /// <summary>Throws QspAbiException unless the library speaks Native.AbiVersion.</summary>
        public static void CheckAbi() { Native.CheckAbi(); }
        public static string StatusString(Status s) { return Native.StatusString(s); }
        public static string DTypeName(DType d) { return Native.Str(Native.qsp_dtype_name((int)d)); }
        public static ulong DTypeSize(DType d, ulong rows, ulong cols) { return Native.qsp_dtype_size((int)d, rows, cols); }
        public static bool BackendAvailable(Backend b) { return Native.qsp_backend_available((int)b) != 0; }

        /// <summary>The process-wide weight-cache statistics of one device.</summary>
        public static CacheStats GetCacheStats(Backend backend, int deviceIndex)
        {
            Native.CheckAbi();
            var s = new Native.qsp_cache_stats();
            Native.qsp_cache_stats_init(ref s);
            Native.CheckGlobal(Native.qsp_cache_stats_get((int)backend, deviceIndex, ref s));
            return new CacheStats { NTensors = s.n_tensors, NBytes = s.n_bytes, NUploads = s.n_uploads, NHits = s.n_hits };
        }
    }

    public struct CacheStats
    {
        public ulong NTensors, NBytes, NUploads, NHits;
    }

    public struct ContextInfo
    {
        public Backend Backend;
        public int DeviceIndex, NThreads;
        public string DeviceName;
        public ulong KvCacheBytes, ScratchBytes;
    }

    /// <summary>What a Context is created with. The constructor takes the
    /// library's defaults (qsp_context_params_init): set the model shape.</summary>
    public sealed class ContextParams
    {
        public uint NLayers, HiddenSize, IntermediateSize, NHeads, NKvHeads, HeadDim, VocabSize, MaxSeqLen;
        public float RmsEps, RopeTheta;
        public RopeStyle RopeStyle;
        public bool QkNorm;
        public Backend Backend;
        public int DeviceIndex;
        /// <summary>CPU threads; 0 = one per core.</summary>
        public int NThreads;
        public int LogLevel;

        public ContextParams()
        {
            var p = new Native.qsp_context_params();
            Native.qsp_context_params_init(ref p);
            RmsEps = p.rms_eps;
            RopeTheta = p.rope_theta;
            RopeStyle = (RopeStyle)p.rope_style;
            QkNorm = p.qk_norm != 0;
            Backend = (Backend)p.backend;
            DeviceIndex = p.device_index;
            NThreads = p.n_threads;
            LogLevel = p.log_level;
        }
    }

    /// <summary>One weight tensor; Data (exactly DTypeSize(DType, Rows, Cols)
    /// bytes) is pinned and read during the upload call only.</summary>
    public sealed class Tensor
    {
        public ulong Handle;
        public DType DType;
        public ulong Rows, Cols;
        public byte[] Data;

        public Tensor(ulong handle, DType dtype, ulong rows, ulong cols, byte[] data)
        {
            Handle = handle; DType = dtype; Rows = rows; Cols = cols; Data = data;
        }
    }

    /// <summary>One layer's tensors; QNorm and KNorm stay null without QK-norm.</summary>
    public sealed class LayerWeights
    {
        public Tensor AttnNorm, Wq, Wk, Wv, QNorm, KNorm, Wo, FfnNorm, WGate, WUp, WDown;
    }

    /// <summary>Pins tensors' arrays for the duration of one call.</summary>
    sealed class Pins : IDisposable
    {
        readonly GCHandle[] handles;
        int n;

        Pins(int capacity) { handles = new GCHandle[capacity]; }

        public static Pins Make(int capacity) { return new Pins(capacity); }

        public Native.qsp_tensor Raw(Tensor t)
        {
            var r = new Native.qsp_tensor();
            if (t == null) return r;
            r.handle = t.Handle;
            r.dtype = (int)t.DType;
            r.n_rows = t.Rows;
            r.n_cols = t.Cols;
            if (t.Data != null && t.Data.Length > 0)
            {
                var h = GCHandle.Alloc(t.Data, GCHandleType.Pinned);
                handles[n++] = h;
                r.data = h.AddrOfPinnedObject();
                r.n_bytes = (ulong)t.Data.Length;
            }
            return r;
        }

        public void Dispose()
        {
            for (int i = 0; i < n; ++i) handles[i].Free();
            n = 0;
        }
    }

    /// <summary>One piece of Context.PrefillBatch: new tokens for one context,
    /// as token ids or as hidden states (HiddenSize floats per token,
    /// row-major). One token is a decode step, many a prompt (or a chunk).</summary>
    public struct BatchPiece
    {
        public readonly Context Context;
        public readonly int[] Tokens;
        public readonly float[] Embeddings;

        public BatchPiece(Context context, int[] tokens)
        {
            Context = context;
            Tokens = tokens;
            Embeddings = null;
        }

        public BatchPiece(Context context, float[] embeddings)
        {
            Context = context;
            Tokens = null;
            Embeddings = embeddings;
        }
    }

    /// <summary>A qsp context: a model shape, its weights and a KV cache.</summary>
    public sealed partial class Context : IDisposable
    {
        static long nextOrder;
        readonly ContextHandle h;
        readonly object gate = new object();
        readonly uint hiddenSize;
        // The order in which PrefillBatch takes the contexts' locks (no
        // deadlock between concurrent batches sharing contexts).
        readonly long order = Interlocked.Increment(ref nextOrder);

        /// <summary>Advances several contexts in one call (qsp_prefill_batch):
        /// each piece as Prefill (or PrefillEmbeddings) of its context would;
        /// afterwards each context has its own logits and greedy token. The
        /// contexts must share one model (the same weights on the same backend
        /// and device) and appear at most once. Everything is checked before
        /// anything changes: on an error (a token out of range, a full context,
        /// the same context twice, ...) it throws QspException whose message
        /// names the offending piece, 0-based ("sequence 1: ..."), and every
        /// context is as it was. The token and embedding arrays are pinned for
        /// the call; every context's lock is held during it. Needs libqsp >=
        /// 1.1: with 1.0 it throws QspException (Unsupported) and changes
        /// nothing (every other call works with 1.0).</summary>
        public static void PrefillBatch(params BatchPiece[] pieces)
        {
            if (pieces == null) throw new ArgumentNullException("pieces");
            Native.CheckAbi();
            uint version = Native.qsp_version_number();
            if (version < Native.PrefillBatchVersion)
                throw new QspException(Status.Unsupported, string.Format(
                    "PrefillBatch needs libqsp >= 1.1.0 (qsp_prefill_batch); the loaded library is {0}",
                    Native.Str(Native.qsp_version_string())));
            var seqs = new Native.qsp_batch_seq[pieces.Length];
            var contexts = new List<Context>(pieces.Length);
            for (int i = 0; i < pieces.Length; ++i)
            {
                var pc = pieces[i];
                if (pc.Context == null)
                    throw new ArgumentException(string.Format("sequence {0}: no context", i), "pieces");
                if (pc.Tokens == null && pc.Embeddings == null)
                    throw new ArgumentException(string.Format("sequence {0}: no tokens or embeddings", i), "pieces");
                if (pc.Embeddings != null)
                {
                    uint hs = pc.Context.hiddenSize;
                    if (hs == 0 || pc.Embeddings.Length % hs != 0)
                        throw new QspException(Status.InvalidArgument, string.Format(
                            "sequence {0}: {1} values are not a whole number of {2}-wide rows", i, pc.Embeddings.Length, hs));
                    seqs[i].n_tokens = (uint)(pc.Embeddings.Length / hs);
                }
                else
                {
                    seqs[i].n_tokens = (uint)pc.Tokens.Length;
                }
                if (!contexts.Contains(pc.Context)) contexts.Add(pc.Context);
            }
            contexts.Sort((a, b) => a.order.CompareTo(b.order));
            var pins = new List<GCHandle>(pieces.Length);
            var refs = new List<ContextHandle>(contexts.Count);
            int locked = 0;
            try
            {
                foreach (var c in contexts)
                {
                    Monitor.Enter(c.gate);
                    ++locked;
                }
                for (int i = 0; i < pieces.Length; ++i)
                    if (pieces[i].Context.h.IsClosed)
                        throw new ObjectDisposedException("Qsp.Context", string.Format("sequence {0}: the Context is disposed", i));
                foreach (var c in contexts)
                {
                    bool added = false;
                    c.h.DangerousAddRef(ref added);  // throws ObjectDisposedException for a disposed one
                    if (added) refs.Add(c.h);
                }
                for (int i = 0; i < pieces.Length; ++i)
                {
                    seqs[i].ctx = pieces[i].Context.h.DangerousGetHandle();
                    object data = (object)pieces[i].Tokens ?? pieces[i].Embeddings;
                    var pin = GCHandle.Alloc(data, GCHandleType.Pinned);
                    pins.Add(pin);
                    // An empty array has no element to point at: a non-zero
                    // pointer with n_tokens 0, for the library to refuse.
                    IntPtr p = pin.AddrOfPinnedObject();
                    if (pieces[i].Tokens != null) seqs[i].tokens = p; else seqs[i].embeddings = p;
                }
                int st = Native.qsp_prefill_batch(seqs, (uint)seqs.Length,
                                                  (uint)Marshal.SizeOf(typeof(Native.qsp_batch_seq)));
                Native.CheckGlobal(st);
            }
            finally
            {
                foreach (var pin in pins) pin.Free();
                foreach (var r in refs) r.DangerousRelease();
                for (int k = locked - 1; k >= 0; --k) Monitor.Exit(contexts[k].gate);
            }
        }

        public Context(ContextParams p)
        {
            Native.CheckAbi();
            var cp = new Native.qsp_context_params();
            Native.qsp_context_params_init(ref cp);
            cp.n_layers = p.NLayers;
            cp.hidden_size = p.HiddenSize;
            cp.intermediate_size = p.IntermediateSize;
            cp.n_heads = p.NHeads;
            cp.n_kv_heads = p.NKvHeads;
            cp.head_dim = p.HeadDim;
            cp.vocab_size = p.VocabSize;
            cp.max_seq_len = p.MaxSeqLen;
            cp.rms_eps = p.RmsEps;
            cp.rope_theta = p.RopeTheta;
            cp.rope_style = (int)p.RopeStyle;
            cp.qk_norm = p.QkNorm ? 1 : 0;
            cp.backend = (int)p.Backend;
            cp.device_index = p.DeviceIndex;
            cp.n_threads = p.NThreads;
            cp.log_level = p.LogLevel;
            ContextHandle handle;
            int st = Native.qsp_context_create(ref cp, out handle);
            if (st != 0)
            {
                string msg = Native.Str(Native.qsp_last_error());
                if (handle != null) handle.Dispose();
                throw new QspException((Status)st, msg);
            }
            h = handle;
            hiddenSize = p.HiddenSize;
        }

        /// <summary>The SafeHandle, for calls this class does not wrap.</summary>
        public ContextHandle Handle { get { return h; } }

        public bool IsDisposed { get { return h.IsClosed; } }

        /// <summary>Frees the context (idempotent). Later calls throw ObjectDisposedException.</summary>
        public void Dispose()
        {
            lock (gate) h.Dispose();
        }

        void Live()
        {
            if (h.IsClosed) throw new ObjectDisposedException("Qsp.Context");
        }

        void Check(int st)
        {
            if (st != 0) throw new QspException((Status)st, Native.Str(Native.qsp_context_last_error(h)));
        }

        /// <summary>The message of the last failure on this context ("" if none).</summary>
        public string LastError
        {
            get { lock (gate) { Live(); return Native.Str(Native.qsp_context_last_error(h)); } }
        }

        public void UploadLayer(uint layer, LayerWeights w)
        {
            if (w == null) throw new ArgumentNullException("w");
            lock (gate)
            {
                Live();
                using (var pins = Pins.Make(11))
                {
                    var lw = new Native.qsp_layer_weights();
                    Native.qsp_layer_weights_init(ref lw);
                    lw.attn_norm = pins.Raw(w.AttnNorm);
                    lw.wq = pins.Raw(w.Wq);
                    lw.wk = pins.Raw(w.Wk);
                    lw.wv = pins.Raw(w.Wv);
                    lw.q_norm = pins.Raw(w.QNorm);
                    lw.k_norm = pins.Raw(w.KNorm);
                    lw.wo = pins.Raw(w.Wo);
                    lw.ffn_norm = pins.Raw(w.FfnNorm);
                    lw.w_gate = pins.Raw(w.WGate);
                    lw.w_up = pins.Raw(w.WUp);
                    lw.w_down = pins.Raw(w.WDown);
                    Check(Native.qsp_upload_layer(h, layer, ref lw));
                }
            }
        }

        public void UploadEmbedding(Tensor t)
        {
            lock (gate)
            {
                Live();
                using (var pins = Pins.Make(1))
                {
                    var raw = pins.Raw(t);
                    Check(Native.qsp_upload_embedding(h, ref raw));
                }
            }
        }

        /// <summary>The final norm and the LM head (the embedding tensor itself for tied embeddings).</summary>
        public void UploadOutput(Tensor norm, Tensor lmHead)
        {
            lock (gate)
            {
                Live();
                using (var pins = Pins.Make(2))
                {
                    var ow = new Native.qsp_output_weights();
                    Native.qsp_output_weights_init(ref ow);
                    ow.norm = pins.Raw(norm);
                    ow.lm_head = pins.Raw(lmHead);
                    Check(Native.qsp_upload_output(h, ref ow));
                }
            }
        }

        /// <summary>Appends tokens to the KV cache and computes the last token's logits.</summary>
        public void Prefill(int[] tokens)
        {
            if (tokens == null) throw new ArgumentNullException("tokens");
            lock (gate)
            {
                Live();
                Check(Native.qsp_prefill(h, tokens.Length > 0 ? tokens : new int[1], (uint)tokens.Length));
            }
        }

        /// <summary>Prefill from hidden states: a multiple of HiddenSize floats, one row per token.</summary>
        public void PrefillEmbeddings(float[] hidden)
        {
            if (hidden == null) throw new ArgumentNullException("hidden");
            if (hiddenSize == 0 || hidden.Length == 0 || hidden.Length % hiddenSize != 0)
                throw new QspException(Status.InvalidArgument, string.Format(
                    "{0} values are not a whole number of {1}-wide rows", hidden.Length, hiddenSize));
            lock (gate)
            {
                Live();
                Check(Native.qsp_prefill_embeddings(h, hidden, (uint)(hidden.Length / hiddenSize)));
            }
        }

        /// <summary>A copy of the last token's logits.</summary>
        public float[] Logits()
        {
            lock (gate)
            {
                Live();
                IntPtr p;
                uint n;
                Check(Native.qsp_get_logits(h, out p, out n));
                var v = new float[n];
                Marshal.Copy(p, v, 0, (int)n);
                return v;
            }
        }

        /// <summary>Copies the logits into dst (length >= vocab size) without allocating.</summary>
        public void CopyLogits(float[] dst)
        {
            if (dst == null) throw new ArgumentNullException("dst");
            lock (gate)
            {
                Live();
                Check(Native.qsp_copy_logits(h, dst, (ulong)dst.Length));
            }
        }

        /// <summary>The library's logits buffer, without a copy: valid only
        /// until the next Prefill, PrefillEmbeddings, KvClear, KvTruncate or
        /// Dispose of this context. Read it only.</summary>
        public IntPtr LogitsPointer(out uint count)
        {
            lock (gate)
            {
                Live();
                IntPtr p;
                Check(Native.qsp_get_logits(h, out p, out count));
                return p;
            }
        }

        /// <summary>The argmax of the last logits (lowest id on ties).</summary>
        public int GreedyToken()
        {
            lock (gate)
            {
                Live();
                int t;
                Check(Native.qsp_greedy_token(h, out t));
                return t;
            }
        }

        public uint KvLength
        {
            get
            {
                lock (gate)
                {
                    Live();
                    uint n;
                    Check(Native.qsp_kv_length(h, out n));
                    return n;
                }
            }
        }

        public void KvClear() { lock (gate) { Live(); Check(Native.qsp_kv_clear(h)); } }

        public void KvTruncate(uint length) { lock (gate) { Live(); Check(Native.qsp_kv_truncate(h, length)); } }

        public unsafe ContextInfo Info()
        {
            lock (gate)
            {
                Live();
                var i = new Native.qsp_context_info();
                Native.qsp_context_info_init(ref i);
                Check(Native.qsp_context_get_info(h, ref i));
                int len = 0;
                while (len < 128 && i.device_name[len] != 0) ++len;
                var bytes = new byte[len];
                for (int k = 0; k < len; ++k) bytes[k] = i.device_name[k];
                return new ContextInfo
                {
                    Backend = (Backend)i.backend,
                    DeviceIndex = i.device_index,
                    NThreads = i.n_threads,
                    DeviceName = System.Text.Encoding.UTF8.GetString(bytes),
                    KvCacheBytes = i.kv_cache_bytes,
                    ScratchBytes = i.scratch_bytes,
                };
            }
        }
    }
}
