// C# bindings to the tokenizer a GGUF file carries (qsp_gguf.h, libqsp >= 1.2).
//
// * Qsp.Tokenizer owns a qsp_tokenizer through a SafeHandle (TokenizerHandle):
//   Dispose() frees it, the finalizer is the safety net.
// * Qsp.TextStream owns a qsp_text_stream (TextStreamHandle), which holds a
//   reference on its tokenizer's handle (DangerousAddRef): the native
//   tokenizer lives until its last stream is freed, even after
//   Tokenizer.Dispose().
// * Output buffers follow the library's size-query protocol: a first buffer,
//   and on BufferTooSmall one of the length the library asks for.
using System;
using System.Runtime.InteropServices;
using System.Text;
using Microsoft.Win32.SafeHandles;

namespace Qsp
{
    /// <summary>The raw tokenizer API of qsp_gguf.h.</summary>
    public static class NativeTokenizer
    {
        const string Lib = Native.Lib;

        /// <summary>The first library version with the tokenizer (1.2.0).</summary>
        public const uint TokenizerVersion = 10200;

        public const uint QSP_TOKENIZE_ADD_SPECIAL = 1;
        public const uint QSP_TOKENIZE_PARSE_SPECIAL = 2;
        public const uint QSP_DETOKENIZE_SKIP_SPECIAL = 1;

        [StructLayout(LayoutKind.Sequential)]
        public struct qsp_tokenizer_info
        {
            public uint struct_size;
            public int kind;
            public uint n_vocab;
            public int bos_id;
            public int eos_id;
            public int eot_id;
            public int add_bos;
            public int add_eos;
            public uint max_piece_bytes;
            public IntPtr model;
            public IntPtr pre;
            public IntPtr chat_template;
            public IntPtr unicode_version;
        }

        [DllImport(Lib)] public static extern int qsp_tokenizer_create(ModelFileHandle g, out TokenizerHandle t);
        [DllImport(Lib)] public static extern void qsp_tokenizer_destroy(IntPtr t);
        [DllImport(Lib)] public static extern void qsp_tokenizer_info_init(ref qsp_tokenizer_info info);
        [DllImport(Lib)] public static extern int qsp_tokenizer_get_info(TokenizerHandle t, ref qsp_tokenizer_info info);
        [DllImport(Lib)] public static extern int qsp_tokenize(TokenizerHandle t, byte[] text, ulong text_len, uint flags,
                                                               int[] ids, ulong capacity, out ulong n_ids);
        [DllImport(Lib)] public static extern int qsp_token_piece(TokenizerHandle t, int id, uint flags, byte[] buf,
                                                                  ulong capacity, out ulong len);
        [DllImport(Lib)] public static extern int qsp_detokenize(TokenizerHandle t, int[] ids, ulong n_ids, uint flags,
                                                                 byte[] buf, ulong capacity, out ulong len);
        [DllImport(Lib)] public static extern int qsp_text_stream_create(TokenizerHandle t, uint flags, out IntPtr s);
        [DllImport(Lib)] public static extern void qsp_text_stream_destroy(IntPtr s);
        [DllImport(Lib)] public static extern int qsp_text_stream_push(TextStreamHandle s, int id, byte[] buf,
                                                                       ulong capacity, out ulong len);
        [DllImport(Lib)] public static extern int qsp_text_stream_flush(TextStreamHandle s, byte[] buf, ulong capacity,
                                                                        out ulong len);

        internal delegate int SizedCall(byte[] buf, ulong capacity, out ulong len);

        /// <summary>Runs call with a buffer of first bytes, then (on
        /// BufferTooSmall) one of the length the library asks for.</summary>
        internal static byte[] Sized(int first, SizedCall call)
        {
            var buf = new byte[Math.Max(first, 1)];
            while (true)
            {
                ulong n;
                int st = call(buf, (ulong)buf.Length, out n);
                if (st == (int)Status.BufferTooSmall && n > (ulong)buf.Length)
                {
                    buf = new byte[checked((int)n)];
                    continue;
                }
                NativeGguf.Check(st);
                var r = new byte[n];
                Array.Copy(buf, r, (int)n);
                return r;
            }
        }
    }

    /// <summary>Owns a qsp_tokenizer*; releasing it calls qsp_tokenizer_destroy.</summary>
    public sealed class TokenizerHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public TokenizerHandle() : base(true) { }

        protected override bool ReleaseHandle()
        {
            NativeTokenizer.qsp_tokenizer_destroy(handle);
            return true;
        }
    }

    /// <summary>Owns a qsp_text_stream* and a reference on its tokenizer's handle.</summary>
    public sealed class TextStreamHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        TokenizerHandle owner;

        internal TextStreamHandle(TokenizerHandle owner) : base(true)
        {
            bool added = false;
            owner.DangerousAddRef(ref added);
            this.owner = owner;
        }

        internal void Set(IntPtr p) { SetHandle(p); }

        protected override bool ReleaseHandle()
        {
            NativeTokenizer.qsp_text_stream_destroy(handle);
            owner.DangerousRelease();
            return true;
        }
    }

    /// <summary>What a Tokenizer is (qsp_tokenizer_info). Ids are -1 where the
    /// model has none; strings are "" where the file has none.</summary>
    public sealed class TokenizerInfo
    {
        public int Kind;            // 1: byte-level BPE ("gpt2"), 2: SentencePiece-style ("llama")
        public uint NVocab;
        public int BosId, EosId, EotId;
        public bool AddBos, AddEos; // what Tokenize adds with addSpecial
        public uint MaxPieceBytes;
        public string Model, Pre, ChatTemplate, UnicodeVersion;
    }

    /// <summary>The tokenizer of a GGUF file: text to token ids and back. It
    /// copies what it needs; the file may be disposed afterwards. Dispose it
    /// when done (the finalizer is the safety net). Immutable: any number of
    /// threads may use one at once.</summary>
    public sealed class Tokenizer : IDisposable
    {
        readonly TokenizerHandle h;

        /// <summary>The tokenizer of an open file (qsp_tokenizer_create).
        /// Throws QspException: Status.Unsupported (no tokenizer:
        /// tokenizer.ggml.model absent or "none"; a model qsp lacks; a libqsp
        /// older than 1.2), Status.BadFormat (a malformed vocabulary).</summary>
        public Tokenizer(ModelFile file)
        {
            if (file == null) throw new ArgumentNullException("file");
            Native.CheckAbi();
            uint version = Native.qsp_version_number();
            if (version < NativeTokenizer.TokenizerVersion)
                throw new QspException(Status.Unsupported, string.Format(
                    "the tokenizer needs libqsp >= 1.2.0 (qsp_tokenizer_create); the loaded library is {0}",
                    Native.Str(Native.qsp_version_string())));
            if (file.IsDisposed) throw new ObjectDisposedException("Qsp.ModelFile");
            TokenizerHandle handle;
            int st = NativeTokenizer.qsp_tokenizer_create(file.Handle, out handle);
            if (st != 0)
            {
                string msg = Native.Str(NativeGguf.qsp_gguf_last_error());
                if (handle != null) handle.Dispose();
                throw new QspException((Status)st, msg);
            }
            h = handle;
        }

        /// <summary>Opens the GGUF file at path, builds its tokenizer, closes the file.</summary>
        public static Tokenizer FromGguf(string path)
        {
            using (var f = new ModelFile(path)) return new Tokenizer(f);
        }

        public TokenizerHandle Handle { get { return h; } }
        public bool IsDisposed { get { return h.IsClosed; } }

        /// <summary>Frees the tokenizer (idempotent; its open streams keep the
        /// native one alive). Later calls throw ObjectDisposedException.</summary>
        public void Dispose() { h.Dispose(); }

        void Live()
        {
            if (h.IsClosed) throw new ObjectDisposedException("Qsp.Tokenizer");
        }

        public TokenizerInfo Info()
        {
            Live();
            var i = new NativeTokenizer.qsp_tokenizer_info();
            NativeTokenizer.qsp_tokenizer_info_init(ref i);
            NativeGguf.Check(NativeTokenizer.qsp_tokenizer_get_info(h, ref i));
            return new TokenizerInfo
            {
                Kind = i.kind, NVocab = i.n_vocab, BosId = i.bos_id, EosId = i.eos_id, EotId = i.eot_id,
                AddBos = i.add_bos != 0, AddEos = i.add_eos != 0, MaxPieceBytes = i.max_piece_bytes,
                Model = Native.Str(i.model), Pre = Native.Str(i.pre), ChatTemplate = Native.Str(i.chat_template),
                UnicodeVersion = Native.Str(i.unicode_version),
            };
        }

        /// <summary>The token ids of text. addSpecial: add BOS / EOS as the
        /// model does; parseSpecial: text spelling a control token
        /// ("&lt;|im_end|&gt;") becomes that token.</summary>
        public int[] Tokenize(string text, bool addSpecial = true, bool parseSpecial = false)
        {
            if (text == null) throw new ArgumentNullException("text");
            return Tokenize(Encoding.UTF8.GetBytes(text), addSpecial, parseSpecial);
        }

        /// <summary>Tokenize of UTF-8 bytes (invalid sequences are tokenized as U+FFFD).</summary>
        public int[] Tokenize(byte[] utf8, bool addSpecial = true, bool parseSpecial = false)
        {
            if (utf8 == null) throw new ArgumentNullException("utf8");
            Live();
            uint flags = (addSpecial ? NativeTokenizer.QSP_TOKENIZE_ADD_SPECIAL : 0) |
                         (parseSpecial ? NativeTokenizer.QSP_TOKENIZE_PARSE_SPECIAL : 0);
            var ids = new int[256];
            while (true)
            {
                ulong n;
                int st = NativeTokenizer.qsp_tokenize(h, utf8, (ulong)utf8.Length, flags, ids, (ulong)ids.Length, out n);
                if (st == (int)Status.BufferTooSmall && n > (ulong)ids.Length)
                {
                    ids = new int[checked((int)n)];
                    continue;
                }
                NativeGguf.Check(st);
                if (n != (ulong)ids.Length) Array.Resize(ref ids, (int)n);
                return ids;
            }
        }

        static uint Skip(bool skipSpecial) { return skipSpecial ? NativeTokenizer.QSP_DETOKENIZE_SKIP_SPECIAL : 0; }

        /// <summary>The text of ids as the bytes they spell (possibly invalid
        /// UTF-8). skipSpecial: control tokens give no text.</summary>
        public byte[] DetokenizeBytes(int[] ids, bool skipSpecial = false)
        {
            if (ids == null) throw new ArgumentNullException("ids");
            Live();
            uint flags = Skip(skipSpecial);
            return NativeTokenizer.Sized(1024, (byte[] buf, ulong cap, out ulong len) =>
                NativeTokenizer.qsp_detokenize(h, ids, (ulong)ids.Length, flags, buf, cap, out len));
        }

        /// <summary>The text of ids (invalid UTF-8 becomes U+FFFD).</summary>
        public string Detokenize(int[] ids, bool skipSpecial = false)
        {
            return Encoding.UTF8.GetString(DetokenizeBytes(ids, skipSpecial));
        }

        /// <summary>The bytes of one token on its own (possibly part of a UTF-8
        /// sequence). QspException (Status.OutOfRange) for an id outside 0..NVocab-1.</summary>
        public byte[] TokenPiece(int id, bool skipSpecial = false)
        {
            Live();
            uint flags = Skip(skipSpecial);
            return NativeTokenizer.Sized(64, (byte[] buf, ulong cap, out ulong len) =>
                NativeTokenizer.qsp_token_piece(h, id, flags, buf, cap, out len));
        }

        /// <summary>A TextStream for decoding generated ids one at a time.</summary>
        public TextStream Stream(bool skipSpecial = false)
        {
            Live();
            return new TextStream(this, Skip(skipSpecial), (int)Info().MaxPieceBytes + 4);
        }
    }

    /// <summary>Streaming detokenization (qsp_text_stream): Push returns the
    /// text that became complete, holding back the bytes of an unfinished
    /// UTF-8 character until a later token completes it; Flush returns what
    /// is held back and starts over. All pushes plus the flush equal
    /// Detokenize of the same ids. Dispose it when done. One thread at a time.</summary>
    public sealed class TextStream : IDisposable
    {
        readonly TextStreamHandle h;
        readonly int first;

        internal TextStream(Tokenizer t, uint flags, int first)
        {
            this.first = first;
            var handle = new TextStreamHandle(t.Handle);
            IntPtr p;
            int st = NativeTokenizer.qsp_text_stream_create(t.Handle, flags, out p);
            if (st != 0)
            {
                string msg = Native.Str(NativeGguf.qsp_gguf_last_error());
                handle.SetHandleAsInvalid();
                handle.Dispose();
                t.Handle.DangerousRelease();
                throw new QspException((Status)st, msg);
            }
            handle.Set(p);
            h = handle;
        }

        public bool IsDisposed { get { return h.IsClosed; } }
        public void Dispose() { h.Dispose(); }

        void Live()
        {
            if (h.IsClosed) throw new ObjectDisposedException("Qsp.TextStream");
        }

        public byte[] PushBytes(int id)
        {
            Live();
            return NativeTokenizer.Sized(first, (byte[] buf, ulong cap, out ulong len) =>
                NativeTokenizer.qsp_text_stream_push(h, id, buf, cap, out len));
        }

        public byte[] FlushBytes()
        {
            Live();
            return NativeTokenizer.Sized(first, (byte[] buf, ulong cap, out ulong len) =>
                NativeTokenizer.qsp_text_stream_flush(h, buf, cap, out len));
        }

        /// <summary>Adds one id; returns the text that became complete.</summary>
        public string Push(int id) { return Encoding.UTF8.GetString(PushBytes(id)); }

        /// <summary>What is held back (an unfinished character as U+FFFD; FlushBytes
        /// gives its raw bytes); the stream starts over.</summary>
        public string Flush() { return Encoding.UTF8.GetString(FlushBytes()); }
    }
}
