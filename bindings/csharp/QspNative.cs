// The raw C API of include/qsp/qsp.h (see Qsp.cs): Qsp.Native and the
// SafeHandle of a qsp_context, ContextHandle.
using System;
using System.Runtime.InteropServices;
using Microsoft.Win32.SafeHandles;

namespace Qsp
{
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
            public uint n_devices;      // 1.3 (reserved0 before)
            public uint device_mask;    // 1.3 (reserved2 before)
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
}
