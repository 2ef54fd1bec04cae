package qsp

// Contexts (qsp_context): parameters and weights, prefill (of one context, or
// of several in one call), logits and the KV cache; the weight cache's
// statistics.

/*
#include <stdlib.h>
#include <string.h>
#include <qsp/qsp.h>

// Global calls keep their message in thread-local storage, and a goroutine may
// change OS threads between two cgo calls: copy the message in the same call.
static char* goqsp_dup_last_error(qsp_status st) {
	return st == QSP_OK ? NULL : strdup(qsp_last_error());
}

static qsp_status goqsp_context_create(const qsp_context_params* p, qsp_context** out, char** msg) {
	qsp_status st = qsp_context_create(p, out);
	*msg = goqsp_dup_last_error(st);
	return st;
}

static qsp_status goqsp_cache_stats_get(int32_t backend, int32_t device, qsp_cache_stats* s, char** msg) {
	qsp_status st = qsp_cache_stats_get(backend, device, s);
	*msg = goqsp_dup_last_error(st);
	return st;
}

// The tensors' data pointers point into Go memory: they travel as separate
// arguments (Go memory without Go pointers, which cgo allows) and are put
// into a struct on the C stack that lives for this call only. The library
// copies what it keeps.
static qsp_status goqsp_upload_layer(qsp_context* ctx, uint32_t layer, const qsp_layer_weights* w,
		const void* d0, const void* d1, const void* d2, const void* d3, const void* d4, const void* d5,
		const void* d6, const void* d7, const void* d8, const void* d9, const void* d10) {
	qsp_layer_weights lw = *w;
	lw.attn_norm.data = d0; lw.wq.data = d1; lw.wk.data = d2; lw.wv.data = d3;
	lw.q_norm.data = d4; lw.k_norm.data = d5; lw.wo.data = d6; lw.ffn_norm.data = d7;
	lw.w_gate.data = d8; lw.w_up.data = d9; lw.w_down.data = d10;
	return qsp_upload_layer(ctx, layer, &lw);
}

static qsp_status goqsp_upload_embedding(qsp_context* ctx, const qsp_tensor* t, const void* d) {
	qsp_tensor e = *t;
	e.data = d;
	return qsp_upload_embedding(ctx, &e);
}

// qsp_prefill_batch with its message copied in the same call (thread-local).
static qsp_status goqsp_prefill_batch(const qsp_batch_seq* seqs, uint32_t n, char** msg) {
	qsp_status st = qsp_prefill_batch(seqs, n, (uint32_t)sizeof(qsp_batch_seq));
	*msg = goqsp_dup_last_error(st);
	return st;
}

static qsp_status goqsp_upload_output(qsp_context* ctx, const qsp_output_weights* w, const void* dn, const void* dh) {
	qsp_output_weights o = *w;
	o.norm.data = dn;
	o.lm_head.data = dh;
	return qsp_upload_output(ctx, &o);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// Params are what a Context is created with (qsp_context_params).
type Params struct {
	NLayers, HiddenSize, IntermediateSize uint32
	NHeads, NKVHeads, HeadDim             uint32
	VocabSize, MaxSeqLen                  uint32
	RMSEps, RopeTheta                     float32
	RopeStyle                             int32 // RopeNeox or RopeInterleaved
	QKNorm                                bool
	Backend                               Backend
	DeviceIndex                           int32
	NThreads                              int32 // CPU threads; 0 = one per core
	// Tensor parallelism (libqsp >= 1.3): the model split into NDevices
	// shards (0 or 1: unsplit). The CPU runs the shards (1, 2, 4 or 8) one
	// after another, bit-identical to the unsplit model; CUDA runs them in
	// turn on one GPU (a one-bit DeviceMask) or a shard per GPU through NCCL
	// (without NCCL: StatusUnsupported). A shape that does not divide is
	// StatusShape. DeviceMask names the CUDA devices, bit i = ordinal i:
	// NDevices bits (a shard per device), one (every shard on that device) or
	// 0 (NDevices devices from DeviceIndex on); checked, not used, on the CPU.
	NDevices, DeviceMask uint32
	LogLevel             int32 // most verbose level logged, QSP_LOG_*
}

// DefaultParams has the library's defaults (qsp_context_params_init) and a
// zero model shape to fill in.
func DefaultParams() Params {
	var p C.qsp_context_params
	C.qsp_context_params_init(&p)
	return Params{
		RMSEps: float32(p.rms_eps), RopeTheta: float32(p.rope_theta), RopeStyle: int32(p.rope_style),
		QKNorm: p.qk_norm != 0, Backend: Backend(p.backend), DeviceIndex: int32(p.device_index),
		NThreads: int32(p.n_threads), NDevices: uint32(p.n_devices), DeviceMask: uint32(p.device_mask),
		LogLevel: int32(p.log_level),
	}
}

// Tensor is one weight tensor; Data (exactly Dtype.Size(NRows, NCols) bytes)
// is read during the upload call only.
type Tensor struct {
	Handle       uint64 // the caller's name for these exact bytes (non-zero)
	Dtype        DType
	NRows, NCols uint64
	Data         []byte
}

// F32Bytes views float32 values as the bytes of an F32 tensor (no copy).
func F32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func (t *Tensor) raw() (C.qsp_tensor, unsafe.Pointer) {
	var r C.qsp_tensor
	if t == nil {
		return r, nil
	}
	r.handle = C.uint64_t(t.Handle)
	r.dtype = C.int32_t(t.Dtype)
	r.n_rows = C.uint64_t(t.NRows)
	r.n_cols = C.uint64_t(t.NCols)
	r.n_bytes = C.uint64_t(len(t.Data))
	if len(t.Data) == 0 {
		return r, nil
	}
	return r, unsafe.Pointer(&t.Data[0])
}

// LayerWeights are one layer's tensors; QNorm and KNorm are nil for models
// without QK-norm.
type LayerWeights struct {
	AttnNorm, WQ, WK, WV, QNorm, KNorm, WO, FFNNorm, WGate, WUp, WDown *Tensor
}

// CacheStats are the weight cache's statistics for one device.
type CacheStats struct {
	NTensors, NBytes, NUploads, NHits uint64
}

// GetCacheStats returns the process-wide weight-cache statistics of a device.
func GetCacheStats(b Backend, deviceIndex int32) (CacheStats, error) {
	if abiErr != nil {
		return CacheStats{}, abiErr
	}
	var s C.qsp_cache_stats
	C.qsp_cache_stats_init(&s)
	var msg *C.char
	if err := takeMessage(C.goqsp_cache_stats_get(C.int32_t(b), C.int32_t(deviceIndex), &s, &msg), msg); err != nil {
		return CacheStats{}, err
	}
	return CacheStats{uint64(s.n_tensors), uint64(s.n_bytes), uint64(s.n_uploads), uint64(s.n_hits)}, nil
}

// Info describes a context.
type Info struct {
	Backend                    Backend
	DeviceIndex, NThreads      int32
	DeviceName                 string
	KVCacheBytes, ScratchBytes uint64
}

// Context is a qsp context: a model shape, its weights and a KV cache.
type Context struct {
	mu         sync.Mutex
	ptr        *C.qsp_context
	hiddenSize uint32
}

var errClosed = &Error{StatusInvalidArgument, "the Context is closed"}

// NewContext creates a context (qsp_context_create).
func NewContext(p Params) (*Context, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var cp C.qsp_context_params
	C.qsp_context_params_init(&cp)
	cp.n_layers = C.uint32_t(p.NLayers)
	cp.hidden_size = C.uint32_t(p.HiddenSize)
	cp.intermediate_size = C.uint32_t(p.IntermediateSize)
	cp.n_heads = C.uint32_t(p.NHeads)
	cp.n_kv_heads = C.uint32_t(p.NKVHeads)
	cp.head_dim = C.uint32_t(p.HeadDim)
	cp.vocab_size = C.uint32_t(p.VocabSize)
	cp.max_seq_len = C.uint32_t(p.MaxSeqLen)
	cp.rms_eps = C.float(p.RMSEps)
	cp.rope_theta = C.float(p.RopeTheta)
	cp.rope_style = C.int32_t(p.RopeStyle)
	cp.qk_norm = 0
	if p.QKNorm {
		cp.qk_norm = 1
	}
	cp.backend = C.int32_t(p.Backend)
	cp.device_index = C.int32_t(p.DeviceIndex)
	cp.n_threads = C.int32_t(p.NThreads)
	cp.n_devices = C.uint32_t(p.NDevices)
	cp.device_mask = C.uint32_t(p.DeviceMask)
	cp.log_level = C.int32_t(p.LogLevel)
	var ptr *C.qsp_context
	var msg *C.char
	if err := takeMessage(C.goqsp_context_create(&cp, &ptr, &msg), msg); err != nil {
		return nil, err
	}
	c := &Context{ptr: ptr, hiddenSize: p.HiddenSize}
	runtime.SetFinalizer(c, (*Context).finalize)
	return c, nil
}

func (c *Context) finalize() {
	if c.ptr != nil {
		C.qsp_context_destroy(c.ptr)
		c.ptr = nil
	}
}

// Close frees the context; later calls return an error. Idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr != nil {
		C.qsp_context_destroy(c.ptr)
		c.ptr = nil
		runtime.SetFinalizer(c, nil)
	}
	return nil
}

// call runs f on the live context under the lock and maps its status; the
// message is the context's own (qsp_context_last_error), so it does not
// depend on the OS thread.
func (c *Context) call(f func(p *C.qsp_context) C.qsp_status) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return errClosed
	}
	st := f(c.ptr)
	var err error
	if st != C.QSP_OK {
		err = &Error{Status(st), C.GoString(C.qsp_context_last_error(c.ptr))}
	}
	runtime.KeepAlive(c) // no finalizer while the C call runs
	return err
}

// LastError is the message of the last failure on this context ("" if none).
func (c *Context) LastError() string {
	var s string
	_ = c.call(func(p *C.qsp_context) C.qsp_status {
		s = C.GoString(C.qsp_context_last_error(p))
		return C.QSP_OK
	})
	return s
}

// UploadLayer registers layer's weights (qsp_upload_layer).
func (c *Context) UploadLayer(layer uint32, w *LayerWeights) error {
	var lw C.qsp_layer_weights
	C.qsp_layer_weights_init(&lw)
	var d [11]unsafe.Pointer
	lw.attn_norm, d[0] = w.AttnNorm.raw()
	lw.wq, d[1] = w.WQ.raw()
	lw.wk, d[2] = w.WK.raw()
	lw.wv, d[3] = w.WV.raw()
	lw.q_norm, d[4] = w.QNorm.raw()
	lw.k_norm, d[5] = w.KNorm.raw()
	lw.wo, d[6] = w.WO.raw()
	lw.ffn_norm, d[7] = w.FFNNorm.raw()
	lw.w_gate, d[8] = w.WGate.raw()
	lw.w_up, d[9] = w.WUp.raw()
	lw.w_down, d[10] = w.WDown.raw()
	err := c.call(func(p *C.qsp_context) C.qsp_status {
		return C.goqsp_upload_layer(p, C.uint32_t(layer), &lw,
			d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10])
	})
	runtime.KeepAlive(w)
	return err
}

// UploadEmbedding registers the token-embedding table (qsp_upload_embedding).
func (c *Context) UploadEmbedding(t *Tensor) error {
	rt, d := t.raw()
	err := c.call(func(p *C.qsp_context) C.qsp_status { return C.goqsp_upload_embedding(p, &rt, d) })
	runtime.KeepAlive(t)
	return err
}

// UploadOutput registers the final norm and the LM head (for tied embeddings,
// pass the embedding tensor as lmHead).
func (c *Context) UploadOutput(norm, lmHead *Tensor) error {
	var ow C.qsp_output_weights
	C.qsp_output_weights_init(&ow)
	var dn, dh unsafe.Pointer
	ow.norm, dn = norm.raw()
	ow.lm_head, dh = lmHead.raw()
	err := c.call(func(p *C.qsp_context) C.qsp_status { return C.goqsp_upload_output(p, &ow, dn, dh) })
	runtime.KeepAlive(norm)
	runtime.KeepAlive(lmHead)
	return err
}

// Prefill appends tokens to the KV cache and computes the last token's logits.
func (c *Context) Prefill(tokens []int32) error {
	var ptr *C.int32_t
	if len(tokens) > 0 {
		ptr = (*C.int32_t)(unsafe.Pointer(&tokens[0]))
	} else {
		var dummy C.int32_t // non-NULL: the library reports n_tokens 0
		ptr = &dummy
	}
	if uint64(len(tokens)) > 0xFFFFFFFF {
		return &Error{StatusOutOfRange, fmt.Sprintf("%d tokens do not fit a uint32", len(tokens))}
	}
	err := c.call(func(p *C.qsp_context) C.qsp_status {
		return C.qsp_prefill(p, ptr, C.uint32_t(len(tokens)))
	})
	runtime.KeepAlive(tokens)
	return err
}

// PrefillEmbeddings is Prefill from hidden states: len(hidden) must be a
// multiple of the hidden size (one row per token).
func (c *Context) PrefillEmbeddings(hidden []float32) error {
	h := int(c.hiddenSize)
	if h == 0 || len(hidden) == 0 || len(hidden)%h != 0 {
		return &Error{StatusInvalidArgument, fmt.Sprintf("%d values are not a whole number of %d-wide rows", len(hidden), h)}
	}
	err := c.call(func(p *C.qsp_context) C.qsp_status {
		return C.qsp_prefill_embeddings(p, (*C.float)(unsafe.Pointer(&hidden[0])), C.uint32_t(len(hidden)/h))
	})
	runtime.KeepAlive(hidden)
	return err
}

// BatchPiece is one piece of PrefillBatch: new tokens for one context, given
// as token ids (Tokens) or as hidden states (Embeddings: one row of the
// context's hidden size per token, row-major); exactly one of the two is set.
// One token is a decode step, many a prompt (or a chunk of one).
type BatchPiece struct {
	Ctx        *Context
	Tokens     []int32
	Embeddings []float32
}

// batchVersion is the first libqsp version with qsp_prefill_batch (1.1.0).
const batchVersion = 10100

// PrefillBatch advances several contexts in one call (qsp_prefill_batch):
// each piece as ctx.Prefill(piece.Tokens) (or PrefillEmbeddings) would, and
// afterwards each context has its own logits and greedy token. The contexts
// must share one model (the same weights on the same backend and device) and
// appear at most once. Everything is checked before anything changes: on an
// error (a token out of range, a full context, the same context twice, ...)
// the returned *Error's message names the offending piece, 0-based
// ("sequence 1: ..."), and every context is as it was.
//
// The pieces' tokens and hidden states are copied into C memory for the call
// (cgo does not let C hold Go pointers inside a struct), and every context's
// lock is held while it runs. Needs libqsp >= 1.1 (this package links
// qsp_prefill_batch, symbol version QSP_1.1).
func PrefillBatch(pieces []BatchPiece) error {
	if abiErr != nil {
		return abiErr
	}
	if v := uint32(C.qsp_version_number()); v < batchVersion {
		return &Error{StatusUnsupported, fmt.Sprintf(
			"PrefillBatch needs libqsp >= 1.1.0 (qsp_prefill_batch); the loaded library is %s", Version())}
	}
	if len(pieces) == 0 {
		return &Error{StatusInvalidArgument, "PrefillBatch: no pieces"}
	}
	if uint64(len(pieces)) > 0xFFFFFFFF {
		return &Error{StatusOutOfRange, fmt.Sprintf("%d pieces do not fit a uint32", len(pieces))}
	}
	// One C block: the seqs, then every piece's data, each 8-byte aligned.
	seqSize := uintptr(C.sizeof_qsp_batch_seq)
	total := seqSize * uintptr(len(pieces))
	for i, pc := range pieces {
		if pc.Ctx == nil {
			return &Error{StatusInvalidArgument, fmt.Sprintf("sequence %d: no context", i)}
		}
		n := len(pc.Tokens)*4 + len(pc.Embeddings)*4
		if h := int(pc.Ctx.hiddenSize); pc.Tokens == nil && h > 0 && len(pc.Embeddings)%h != 0 {
			return &Error{StatusInvalidArgument, fmt.Sprintf("sequence %d: %d values are not a whole number of %d-wide rows",
				i, len(pc.Embeddings), h)}
		}
		total += (uintptr(n) + 7) &^ 7
	}
	block := C.malloc(C.size_t(total))
	if block == nil {
		return &Error{StatusOutOfMemory, "PrefillBatch: out of memory"}
	}
	defer C.free(block)
	seqs := unsafe.Slice((*C.qsp_batch_seq)(block), len(pieces))
	data := unsafe.Add(block, seqSize*uintptr(len(pieces)))
	for i, pc := range pieces {
		s := &seqs[i]
		*s = C.qsp_batch_seq{}
		// Both or neither set: passed on as such, for the library to refuse.
		if pc.Tokens != nil {
			s.tokens = (*C.int32_t)(data)
			copy(unsafe.Slice((*int32)(data), len(pc.Tokens)), pc.Tokens)
			data = unsafe.Add(data, (len(pc.Tokens)*4+7)&^7)
			s.n_tokens = C.uint32_t(len(pc.Tokens))
		}
		if pc.Embeddings != nil {
			s.embeddings = (*C.float)(data)
			copy(unsafe.Slice((*float32)(data), len(pc.Embeddings)), pc.Embeddings)
			data = unsafe.Add(data, (len(pc.Embeddings)*4+7)&^7)
			if pc.Tokens == nil && pc.Ctx.hiddenSize > 0 {
				s.n_tokens = C.uint32_t(len(pc.Embeddings) / int(pc.Ctx.hiddenSize))
			}
		}
	}
	// Every context's lock, in address order (two batches sharing contexts
	// cannot deadlock); a context listed twice is locked once, and the library
	// refuses the batch.
	ctxs := make([]*Context, 0, len(pieces))
	seen := make(map[*Context]bool, len(pieces))
	for _, pc := range pieces {
		if !seen[pc.Ctx] {
			seen[pc.Ctx] = true
			ctxs = append(ctxs, pc.Ctx)
		}
	}
	sort.Slice(ctxs, func(a, b int) bool { return uintptr(unsafe.Pointer(ctxs[a])) < uintptr(unsafe.Pointer(ctxs[b])) })
	for _, c := range ctxs {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	for i, pc := range pieces {
		if pc.Ctx.ptr == nil {
			return &Error{StatusInvalidArgument, fmt.Sprintf("sequence %d: the Context is closed", i)}
		}
		seqs[i].ctx = pc.Ctx.ptr
	}
	var msg *C.char
	err := takeMessage(C.goqsp_prefill_batch(&seqs[0], C.uint32_t(len(pieces)), &msg), msg)
	runtime.KeepAlive(pieces) // no finalizer while the C call runs
	return err
}

// Logits returns a copy of the last token's logits.
func (c *Context) Logits() ([]float32, error) {
	var out []float32
	err := c.call(func(p *C.qsp_context) C.qsp_status {
		var lp *C.float
		var n C.uint32_t
		if st := C.qsp_get_logits(p, &lp, &n); st != C.QSP_OK {
			return st
		}
		out = make([]float32, int(n))
		copy(out, unsafe.Slice((*float32)(unsafe.Pointer(lp)), int(n)))
		return C.QSP_OK
	})
	return out, err
}

// LogitsView returns the last token's logits WITHOUT a copy: a slice over the
// library's buffer, valid only until the next Prefill, PrefillEmbeddings,
// KVClear, KVTruncate or Close of this context (keep the Context reachable,
// e.g. with runtime.KeepAlive, while using it). Do not write to it.
func (c *Context) LogitsView() ([]float32, error) {
	var out []float32
	err := c.call(func(p *C.qsp_context) C.qsp_status {
		var lp *C.float
		var n C.uint32_t
		st := C.qsp_get_logits(p, &lp, &n)
		if st == C.QSP_OK {
			out = unsafe.Slice((*float32)(unsafe.Pointer(lp)), int(n))
		}
		return st
	})
	return out, err
}

// GreedyToken is the argmax of the last logits (lowest id on ties).
func (c *Context) GreedyToken() (int32, error) {
	var t C.int32_t
	err := c.call(func(p *C.qsp_context) C.qsp_status { return C.qsp_greedy_token(p, &t) })
	return int32(t), err
}

// KVLength is the number of tokens in the KV cache.
func (c *Context) KVLength() (uint32, error) {
	var n C.uint32_t
	err := c.call(func(p *C.qsp_context) C.qsp_status { return C.qsp_kv_length(p, &n) })
	return uint32(n), err
}

// KVClear empties the KV cache and forgets the logits.
func (c *Context) KVClear() error {
	return c.call(func(p *C.qsp_context) C.qsp_status { return C.qsp_kv_clear(p) })
}

// KVTruncate keeps the first length tokens and forgets the logits.
func (c *Context) KVTruncate(length uint32) error {
	return c.call(func(p *C.qsp_context) C.qsp_status { return C.qsp_kv_truncate(p, C.uint32_t(length)) })
}

// Info describes the context (qsp_context_get_info).
func (c *Context) Info() (Info, error) {
	var i C.qsp_context_info
	C.qsp_context_info_init(&i)
	err := c.call(func(p *C.qsp_context) C.qsp_status { return C.qsp_context_get_info(p, &i) })
	if err != nil {
		return Info{}, err
	}
	name := C.GoStringN(&i.device_name[0], C.int(C.strnlen(&i.device_name[0], C.size_t(len(i.device_name)))))
	return Info{Backend(i.backend), int32(i.device_index), int32(i.n_threads), name,
		uint64(i.kv_cache_bytes), uint64(i.scratch_bytes)}, nil
}
