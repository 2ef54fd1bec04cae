// Qsp.Context (see Qsp.cs): what it is made with (ContextParams), its weights
// (Tensor, LayerWeights), prefill (of one context, or of several in one call:
// BatchPiece, Context.PrefillBatch), logits and the KV cache.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;

namespace Qsp
{
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
        /// <summary>Tensor parallelism (libqsp >= 1.3): the model split into
        /// this many shards; 0 or 1 = unsplit. The CPU runs the shards (1, 2,
        /// 4 or 8) one after another, bit-identical to the unsplit model; CUDA
        /// runs them in turn on one GPU (a one-bit DeviceMask) or a shard per
        /// GPU through NCCL (without NCCL: Status.Unsupported). A shape that
        /// does not divide is Status.Shape.</summary>
        public uint NDevices;
        /// <summary>The shards' CUDA devices, bit i = ordinal i: NDevices bits
        /// (a shard per device), one bit (every shard on that device) or 0
        /// (NDevices devices from DeviceIndex on). Checked, not used, on the
        /// CPU.</summary>
        public uint DeviceMask;
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
            NDevices = p.n_devices;
            DeviceMask = p.device_mask;
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
            cp.n_devices = p.NDevices;
            cp.device_mask = p.DeviceMask;
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
