// C# bindings to libqsp's GGUF loader (include/qsp/qsp_gguf.h).
//
// * Qsp.ModelFile owns a qsp_gguf through a SafeHandle (ModelFileHandle):
//   Dispose() unmaps the file, the finalizer is the safety net.
// * ModelFile.CreateContext / Context.FromGguf make a context holding the
//   whole model. The progress delegate is called through a native callback;
//   an exception it throws never crosses into C: it is caught, the delegate
//   is not called again, the half-made context is disposed and the exception
//   is rethrown (its stack trace kept) once the upload returns.
// * Failing calls throw QspException with the status and
//   qsp_gguf_last_error()'s message, read on the same thread.
using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Text;
using Microsoft.Win32.SafeHandles;

namespace Qsp
{
    /// <summary>The raw qsp_gguf.h API.</summary>
    public static class NativeGguf
    {
        const string Lib = Native.Lib;

        [StructLayout(LayoutKind.Sequential)]
        public unsafe struct qsp_gguf_info
        {
            public uint struct_size;
            public uint version;
            public ulong file_size;
            public ulong tensor_count;
            public ulong kv_count;
            public ulong data_offset;
            public ulong weight_bytes;
            public uint alignment;
            public int known_architecture;
            public fixed byte architecture[32];
            public fixed byte name[96];
            public uint n_layers;
            public uint hidden_size;
            public uint intermediate_size;
            public uint n_heads;
            public uint n_kv_heads;
            public uint head_dim;
            public uint vocab_size;
            public uint context_length;
            public float rms_eps;
            public float rope_theta;
            public int rope_style;
            public int qk_norm;
            public int tied_embeddings;
            public int file_type;
        }

        [StructLayout(LayoutKind.Sequential)]
        public unsafe struct qsp_gguf_tensor_desc
        {
            public uint struct_size;
            public int type;
            public uint n_dims;
            public uint reserved;
            public IntPtr name;
            public IntPtr type_name;
            public fixed ulong ne[4];
            public ulong n_rows;
            public ulong n_cols;
            public ulong offset;
            public ulong n_bytes;
            public ulong handle;
            public IntPtr data;
        }

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate void qsp_gguf_progress_callback(ulong done_bytes, ulong total_bytes, IntPtr user_data);

        [DllImport(Lib)] public static extern IntPtr qsp_gguf_last_error();
        [DllImport(Lib)] public static extern int qsp_gguf_open(byte[] path, out ModelFileHandle g);
        [DllImport(Lib)] public static extern void qsp_gguf_close(IntPtr g);
        [DllImport(Lib)] public static extern void qsp_gguf_info_init(ref qsp_gguf_info info);
        [DllImport(Lib)] public static extern int qsp_gguf_get_info(ModelFileHandle g, ref qsp_gguf_info info);
        [DllImport(Lib)] public static extern ulong qsp_gguf_tensor_count(ModelFileHandle g);
        [DllImport(Lib)] public static extern void qsp_gguf_tensor_desc_init(ref qsp_gguf_tensor_desc d);
        [DllImport(Lib)] public static extern int qsp_gguf_tensor_info(ModelFileHandle g, ulong index, ref qsp_gguf_tensor_desc d);
        [DllImport(Lib)] public static extern int qsp_gguf_find_tensor(ModelFileHandle g, byte[] name, out ulong index);
        [DllImport(Lib)] public static extern IntPtr qsp_gguf_type_name(int ggml_type);
        [DllImport(Lib)] public static extern int qsp_gguf_fill_params(ModelFileHandle g, ref Native.qsp_context_params p);
        [DllImport(Lib)] public static extern int qsp_gguf_upload(ModelFileHandle g, ContextHandle ctx,
                                                                 qsp_gguf_progress_callback progress, IntPtr user_data);

        internal static void Check(int st)
        {
            if (st != 0) throw new QspException((Status)st, Native.Str(qsp_gguf_last_error()));
        }

        internal static byte[] Utf8z(string s)
        {
            var b = Encoding.UTF8.GetBytes(s);
            Array.Resize(ref b, b.Length + 1);
            return b;
        }

        internal static unsafe string FixedStr(byte* p, int capacity)
        {
            int n = 0;
            while (n < capacity && p[n] != 0) ++n;
            return Encoding.UTF8.GetString(p, n);
        }
    }

    /// <summary>Owns a qsp_gguf*; releasing it calls qsp_gguf_close.</summary>
    public sealed class ModelFileHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public ModelFileHandle() : base(true) { }

        protected override bool ReleaseHandle()
        {
            NativeGguf.qsp_gguf_close(handle);
            return true;
        }
    }

    /// <summary>How a context made from a model file runs. The defaults are the
    /// library's: Backend.Auto, device 0, one thread per core, the file's
    /// context length capped at 8192.</summary>
    public sealed class ExecOptions
    {
        public Backend Backend = Backend.Auto;
        public int DeviceIndex;
        /// <summary>CPU threads; 0 = one per core.</summary>
        public int NThreads;
        /// <summary>KV-cache capacity in tokens; 0 = the file's context length,
        /// at most 8192 (a larger value is capped at the file's).</summary>
        public uint ContextLength;
        /// <summary>Shards of the model (libqsp >= 1.3; see
        /// ContextParams.NDevices); 0 = unsplit.</summary>
        public uint NDevices;
        /// <summary>Their CUDA devices (see ContextParams.DeviceMask); 0 = from
        /// DeviceIndex on.</summary>
        public uint DeviceMask;
    }

    /// <summary>What a GGUF file says about itself (qsp_gguf_info).</summary>
    public sealed class GgufInfo
    {
        public uint Version;
        public ulong FileSize, TensorCount, KvCount, DataOffset, WeightBytes;
        public uint Alignment;
        /// <summary>"qwen3" or "llama".</summary>
        public bool KnownArchitecture;
        public string Architecture, Name;
        public uint NLayers, HiddenSize, IntermediateSize, NHeads, NKvHeads, HeadDim, VocabSize, ContextLength;
        public float RmsEps, RopeTheta;
        /// <summary>QSP_ROPE_*; -1 for an unknown architecture.</summary>
        public int RopeStyle;
        /// <summary>1 / 0; -1 for an unknown architecture.</summary>
        public int QkNorm;
        public bool TiedEmbeddings;
        /// <summary>general.file_type, -1 if missing.</summary>
        public int FileType;
    }

    /// <summary>One tensor of a GGUF file (qsp_gguf_tensor_desc).</summary>
    public sealed class TensorInfo
    {
        public string Name;
        /// <summary>The GGML type id (qsp runs the DType values; others e.g. 14, q6_K).</summary>
        public int Type;
        /// <summary>"q4_0", "q6_K", ...</summary>
        public string TypeName;
        /// <summary>The dimensions as stored, contiguous one first.</summary>
        public ulong[] Shape;
        public ulong NRows, NCols, Offset, NBytes;
        /// <summary>The weight-cache handle an upload uses.</summary>
        public ulong Handle;
    }

    /// <summary>An open GGUF model file, memory-mapped read-only. Dispose it
    /// when done (the finalizer is a safety net). Contexts made from it do not
    /// need it open. Safe to use from many threads, as long as none disposes it
    /// meanwhile.</summary>
    public sealed class ModelFile : IDisposable
    {
        readonly ModelFileHandle h;

        /// <summary>Opens and validates the GGUF file at path (qsp_gguf_open).
        /// Throws QspException: Status.IO (missing, unreadable), Status.BadFormat
        /// (not GGUF, truncated, malformed), Status.Unsupported.</summary>
        public ModelFile(string path)
        {
            Native.CheckAbi();
            ModelFileHandle handle;
            int st = NativeGguf.qsp_gguf_open(NativeGguf.Utf8z(path), out handle);
            if (st != 0)
            {
                string msg = Native.Str(NativeGguf.qsp_gguf_last_error());
                if (handle != null) handle.Dispose();
                throw new QspException((Status)st, msg);
            }
            h = handle;
        }

        /// <summary>The SafeHandle, for calls this class does not wrap.</summary>
        public ModelFileHandle Handle { get { return h; } }

        public bool IsDisposed { get { return h.IsClosed; } }

        /// <summary>Unmaps the file (idempotent). Later calls throw ObjectDisposedException.</summary>
        public void Dispose() { h.Dispose(); }

        void Live()
        {
            if (h.IsClosed) throw new ObjectDisposedException("Qsp.ModelFile");
        }

        /// <summary>What the file says about itself.</summary>
        public unsafe GgufInfo Info()
        {
            Live();
            var i = new NativeGguf.qsp_gguf_info();
            NativeGguf.qsp_gguf_info_init(ref i);
            NativeGguf.Check(NativeGguf.qsp_gguf_get_info(h, ref i));
            return new GgufInfo
            {
                Version = i.version, FileSize = i.file_size, TensorCount = i.tensor_count, KvCount = i.kv_count,
                DataOffset = i.data_offset, WeightBytes = i.weight_bytes, Alignment = i.alignment,
                KnownArchitecture = i.known_architecture != 0,
                Architecture = NativeGguf.FixedStr(i.architecture, 32), Name = NativeGguf.FixedStr(i.name, 96),
                NLayers = i.n_layers, HiddenSize = i.hidden_size, IntermediateSize = i.intermediate_size,
                NHeads = i.n_heads, NKvHeads = i.n_kv_heads, HeadDim = i.head_dim, VocabSize = i.vocab_size,
                ContextLength = i.context_length, RmsEps = i.rms_eps, RopeTheta = i.rope_theta,
                RopeStyle = i.rope_style, QkNorm = i.qk_norm, TiedEmbeddings = i.tied_embeddings != 0,
                FileType = i.file_type,
            };
        }

        /// <summary>The number of tensors.</summary>
        public ulong TensorCount { get { Live(); return NativeGguf.qsp_gguf_tensor_count(h); } }

        unsafe TensorInfo TensorAt(ulong index)
        {
            var d = new NativeGguf.qsp_gguf_tensor_desc();
            NativeGguf.qsp_gguf_tensor_desc_init(ref d);
            NativeGguf.Check(NativeGguf.qsp_gguf_tensor_info(h, index, ref d));
            var shape = new ulong[Math.Min(d.n_dims, 4u)];
            for (int k = 0; k < shape.Length; ++k) shape[k] = d.ne[k];
            return new TensorInfo
            {
                Name = Native.Str(d.name), Type = d.type, TypeName = Native.Str(d.type_name), Shape = shape,
                NRows = d.n_rows, NCols = d.n_cols, Offset = d.offset, NBytes = d.n_bytes, Handle = d.handle,
            };
        }

        /// <summary>The tensor directory, in file order.</summary>
        public List<TensorInfo> Tensors()
        {
            ulong n = TensorCount;
            var list = new List<TensorInfo>((int)n);
            for (ulong i = 0; i < n; ++i) list.Add(TensorAt(i));
            return list;
        }

        /// <summary>The tensor called name; QspException (Status.OutOfRange) if there is none.</summary>
        public TensorInfo Tensor(string name)
        {
            Live();
            ulong index;
            NativeGguf.Check(NativeGguf.qsp_gguf_find_tensor(h, NativeGguf.Utf8z(name), out index));
            return TensorAt(index);
        }

        /// <summary>The context parameters of this model with these options,
        /// after checking that qsp can run it (Status.Unsupported /
        /// Status.BadFormat otherwise).</summary>
        public ContextParams Params(ExecOptions options)
        {
            Live();
            var o = options ?? new ExecOptions();
            var p = new Native.qsp_context_params();
            Native.qsp_context_params_init(ref p);
            p.backend = (int)o.Backend;
            p.device_index = o.DeviceIndex;
            p.n_threads = o.NThreads;
            p.max_seq_len = o.ContextLength;
            p.n_devices = o.NDevices;
            p.device_mask = o.DeviceMask;
            NativeGguf.Check(NativeGguf.qsp_gguf_fill_params(h, ref p));
            return new ContextParams
            {
                NLayers = p.n_layers, HiddenSize = p.hidden_size, IntermediateSize = p.intermediate_size,
                NHeads = p.n_heads, NKvHeads = p.n_kv_heads, HeadDim = p.head_dim, VocabSize = p.vocab_size,
                MaxSeqLen = p.max_seq_len, RmsEps = p.rms_eps, RopeTheta = p.rope_theta,
                RopeStyle = (RopeStyle)p.rope_style, QkNorm = p.qk_norm != 0, Backend = (Backend)p.backend,
                DeviceIndex = p.device_index, NThreads = p.n_threads, NDevices = p.n_devices,
                DeviceMask = p.device_mask, LogLevel = p.log_level,
            };
        }

        /// <summary>A context holding this whole model, ready to prefill.
        /// progress (may be null) receives the bytes handed to the library so
        /// far and in all. An exception it throws is rethrown here once the
        /// upload returns; the delegate is not called again and the half-made
        /// context is disposed.</summary>
        public Context CreateContext(ExecOptions options, Action<ulong, ulong> progress = null)
        {
            var ctx = new Context(Params(options));
            ExceptionDispatchInfo thrown = null;
            NativeGguf.qsp_gguf_progress_callback cb = null;
            if (progress != null)
            {
                cb = (done, total, user) =>
                {
                    if (thrown != null) return;
                    try { progress(done, total); }
                    catch (Exception e) { thrown = ExceptionDispatchInfo.Capture(e); }
                };
            }
            int st;
            string msg = "";
            try
            {
                st = NativeGguf.qsp_gguf_upload(h, ctx.Handle, cb, IntPtr.Zero);
                if (st != 0) msg = Native.Str(NativeGguf.qsp_gguf_last_error());
                GC.KeepAlive(cb);
            }
            catch
            {
                ctx.Dispose();
                throw;
            }
            if (thrown != null || st != 0)
            {
                ctx.Dispose();
                if (thrown != null) thrown.Throw();
                throw new QspException((Status)st, msg);
            }
            return ctx;
        }

        /// <summary>The name of a GGML type id ("q4_0", "q6_K", ...); "unknown" otherwise.</summary>
        public static string TypeName(int ggmlType) { return Native.Str(NativeGguf.qsp_gguf_type_name(ggmlType)); }
    }

    public sealed partial class Context
    {
        /// <summary>A context holding the whole model of the GGUF file at path,
        /// ready to prefill (ModelFile.CreateContext, then Dispose of the file).</summary>
        public static Context FromGguf(string path, ExecOptions options, Action<ulong, ulong> progress = null)
        {
            using (var f = new ModelFile(path)) return f.CreateContext(options, progress);
        }
    }
}
