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
//
// This file has the enums, the exceptions and Library; QspNative.cs has
// Native and ContextHandle, QspContext.cs the Context (QspGguf.cs and
// QspTokenizer.cs: qsp_gguf.h).
using System;

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
}
