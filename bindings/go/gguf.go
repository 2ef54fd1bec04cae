package qsp

// GGUF model files (include/qsp/qsp_gguf.h).

/*
#include <stdlib.h>
#include <string.h>
#include <qsp/qsp_gguf.h>

// qsp_gguf_last_error() is per OS thread and a goroutine may change threads
// between two cgo calls: each wrapper copies the message in the same call.
static char* goqsp_gguf_dup_error(qsp_status st) {
	return st == QSP_OK ? NULL : strdup(qsp_gguf_last_error());
}

static qsp_status goqsp_gguf_open(const char* path, qsp_gguf** out, char** msg) {
	qsp_status st = qsp_gguf_open(path, out);
	*msg = goqsp_gguf_dup_error(st);
	return st;
}

static qsp_status goqsp_gguf_get_info(const qsp_gguf* g, qsp_gguf_info* info, char** msg) {
	qsp_status st;
	qsp_gguf_info_init(info);
	st = qsp_gguf_get_info(g, info);
	*msg = goqsp_gguf_dup_error(st);
	return st;
}

static qsp_status goqsp_gguf_tensor_info(const qsp_gguf* g, uint64_t i, qsp_gguf_tensor_desc* d, char** msg) {
	qsp_status st;
	qsp_gguf_tensor_desc_init(d);
	st = qsp_gguf_tensor_info(g, i, d);
	*msg = goqsp_gguf_dup_error(st);
	return st;
}

static qsp_status goqsp_gguf_find_tensor(const qsp_gguf* g, const char* name, uint64_t* i, char** msg) {
	qsp_status st = qsp_gguf_find_tensor(g, name, i);
	*msg = goqsp_gguf_dup_error(st);
	return st;
}

static qsp_status goqsp_gguf_fill_params(const qsp_gguf* g, qsp_context_params* p, char** msg) {
	qsp_status st = qsp_gguf_fill_params(g, p);
	*msg = goqsp_gguf_dup_error(st);
	return st;
}

// Defined in Go (gguf_callback.go): runs the progress func of handle h.
extern void goqspProgress(uint64_t done, uint64_t total, uintptr_t h);

static void goqsp_progress_trampoline(uint64_t done, uint64_t total, void* user) {
	goqspProgress(done, total, (uintptr_t)user);
}

// h == 0: no progress callback.
static qsp_status goqsp_gguf_upload(const qsp_gguf* g, qsp_context* ctx, uintptr_t h, char** msg) {
	qsp_status st = qsp_gguf_upload(g, ctx, h ? goqsp_progress_trampoline : NULL, (void*)h);
	*msg = goqsp_gguf_dup_error(st);
	return st;
}
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"
)

// ExecOptions are how a context made from a model file runs. The zero value
// means the library's defaults: BackendAuto, device 0, one thread per core,
// the file's context length capped at 8192.
type ExecOptions struct {
	Backend     Backend
	DeviceIndex int32
	NThreads    int32 // CPU threads; 0 = one per core
	// KV-cache capacity in tokens; 0 = the file's context length, at most
	// 8192 (a larger value is capped at the file's).
	ContextLength uint32
	// Shards of the model and their CUDA devices (libqsp >= 1.3; see
	// Params.NDevices); 0 and 0: unsplit.
	NDevices, DeviceMask uint32
}

// GGUFInfo is what a GGUF file says about itself (qsp_gguf_info).
type GGUFInfo struct {
	Version                                                 uint32
	FileSize, TensorCount, KVCount, DataOffset, WeightBytes uint64
	Alignment                                               uint32
	KnownArchitecture                                       bool // "qwen3" or "llama"
	Architecture, Name                                      string
	NLayers, HiddenSize, IntermediateSize, NHeads, NKVHeads uint32
	HeadDim, VocabSize, ContextLength                       uint32
	RMSEps, RopeTheta                                       float32
	RopeStyle                                               int32 // RopeNeox / RopeInterleaved; -1 for an unknown architecture
	QKNorm                                                  int32 // 1 / 0; -1 for an unknown architecture
	TiedEmbeddings                                          bool
	FileType                                                int32 // general.file_type, -1 if missing
}

// TensorInfo is one tensor of a GGUF file (qsp_gguf_tensor_desc).
type TensorInfo struct {
	Name     string
	Type     DType    // the GGML type id (qsp runs the DType constants; others e.g. 14, q6_K)
	TypeName string   // "q4_0", "q6_K", ...
	Shape    []uint64 // the dimensions as stored, contiguous one first
	NRows    uint64   // Shape[1] * Shape[2] * Shape[3]
	NCols    uint64   // Shape[0]
	Offset   uint64   // absolute file offset of the data
	NBytes   uint64
	Handle   uint64 // the weight-cache handle an upload uses
}

// ModelFile is an open GGUF model file, memory-mapped read-only. Close it
// when done; a finalizer closes a forgotten one as a safety net. Contexts
// made from it do not need it open. It may be used by many goroutines at once.
type ModelFile struct {
	mu  sync.RWMutex // read: any use; write: Close
	ptr *C.qsp_gguf
}

var errFileClosed = &Error{StatusInvalidArgument, "the ModelFile is closed"}

// OpenModelFile opens and validates the GGUF file at path (qsp_gguf_open).
// Errors: StatusIO (missing, unreadable), StatusBadFormat (not GGUF,
// truncated, malformed), StatusUnsupported, with the library's message.
func OpenModelFile(path string) (*ModelFile, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ptr *C.qsp_gguf
	var msg *C.char
	if err := takeMessage(C.goqsp_gguf_open(cpath, &ptr, &msg), msg); err != nil {
		return nil, err
	}
	f := &ModelFile{ptr: ptr}
	runtime.SetFinalizer(f, (*ModelFile).finalize)
	return f, nil
}

func (f *ModelFile) finalize() {
	if f.ptr != nil {
		C.qsp_gguf_close(f.ptr)
		f.ptr = nil
	}
}

// Close unmaps the file; later calls return an error. Idempotent.
func (f *ModelFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ptr != nil {
		C.qsp_gguf_close(f.ptr)
		f.ptr = nil
		runtime.SetFinalizer(f, nil)
	}
	return nil
}

// use runs fn on the open file under the read lock.
func (f *ModelFile) use(fn func(g *C.qsp_gguf) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.ptr == nil {
		return errFileClosed
	}
	err := fn(f.ptr)
	runtime.KeepAlive(f)
	return err
}

// Info describes the file.
func (f *ModelFile) Info() (GGUFInfo, error) {
	var i C.qsp_gguf_info
	err := f.use(func(g *C.qsp_gguf) error {
		var msg *C.char
		return takeMessage(C.goqsp_gguf_get_info(g, &i, &msg), msg)
	})
	if err != nil {
		return GGUFInfo{}, err
	}
	return GGUFInfo{
		Version: uint32(i.version), FileSize: uint64(i.file_size), TensorCount: uint64(i.tensor_count),
		KVCount: uint64(i.kv_count), DataOffset: uint64(i.data_offset), WeightBytes: uint64(i.weight_bytes),
		Alignment: uint32(i.alignment), KnownArchitecture: i.known_architecture != 0,
		Architecture: C.GoString(&i.architecture[0]), Name: C.GoString(&i.name[0]),
		NLayers: uint32(i.n_layers), HiddenSize: uint32(i.hidden_size), IntermediateSize: uint32(i.intermediate_size),
		NHeads: uint32(i.n_heads), NKVHeads: uint32(i.n_kv_heads), HeadDim: uint32(i.head_dim),
		VocabSize: uint32(i.vocab_size), ContextLength: uint32(i.context_length),
		RMSEps: float32(i.rms_eps), RopeTheta: float32(i.rope_theta), RopeStyle: int32(i.rope_style),
		QKNorm: int32(i.qk_norm), TiedEmbeddings: i.tied_embeddings != 0, FileType: int32(i.file_type),
	}, nil
}

func tensorAt(g *C.qsp_gguf, index uint64) (TensorInfo, error) {
	var d C.qsp_gguf_tensor_desc
	var msg *C.char
	if err := takeMessage(C.goqsp_gguf_tensor_info(g, C.uint64_t(index), &d, &msg), msg); err != nil {
		return TensorInfo{}, err
	}
	n := int(d.n_dims)
	if n > 4 {
		n = 4
	}
	shape := make([]uint64, n)
	for k := 0; k < n; k++ {
		shape[k] = uint64(d.ne[k])
	}
	return TensorInfo{
		Name: C.GoString(d.name), Type: DType(d._type), TypeName: C.GoString(d.type_name), Shape: shape,
		NRows: uint64(d.n_rows), NCols: uint64(d.n_cols), Offset: uint64(d.offset), NBytes: uint64(d.n_bytes),
		Handle: uint64(d.handle),
	}, nil
}

// Tensors is the tensor directory, in file order.
func (f *ModelFile) Tensors() ([]TensorInfo, error) {
	var out []TensorInfo
	err := f.use(func(g *C.qsp_gguf) error {
		n := uint64(C.qsp_gguf_tensor_count(g))
		out = make([]TensorInfo, 0, n)
		for i := uint64(0); i < n; i++ {
			t, err := tensorAt(g, i)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// Tensor is the tensor called name; StatusOutOfRange if there is none.
func (f *ModelFile) Tensor(name string) (TensorInfo, error) {
	var t TensorInfo
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	err := f.use(func(g *C.qsp_gguf) error {
		var index C.uint64_t
		var msg *C.char
		if err := takeMessage(C.goqsp_gguf_find_tensor(g, cname, &index, &msg), msg); err != nil {
			return err
		}
		var err error
		t, err = tensorAt(g, uint64(index))
		return err
	})
	return t, err
}

// Params are the context parameters of this model with o, after checking
// that qsp can run it (StatusUnsupported / StatusBadFormat otherwise).
func (f *ModelFile) Params(o ExecOptions) (Params, error) {
	var p C.qsp_context_params
	C.qsp_context_params_init(&p)
	p.backend = C.int32_t(o.Backend)
	p.device_index = C.int32_t(o.DeviceIndex)
	p.n_threads = C.int32_t(o.NThreads)
	p.max_seq_len = C.uint32_t(o.ContextLength)
	p.n_devices = C.uint32_t(o.NDevices)
	p.device_mask = C.uint32_t(o.DeviceMask)
	err := f.use(func(g *C.qsp_gguf) error {
		var msg *C.char
		return takeMessage(C.goqsp_gguf_fill_params(g, &p, &msg), msg)
	})
	if err != nil {
		return Params{}, err
	}
	return Params{
		NLayers: uint32(p.n_layers), HiddenSize: uint32(p.hidden_size), IntermediateSize: uint32(p.intermediate_size),
		NHeads: uint32(p.n_heads), NKVHeads: uint32(p.n_kv_heads), HeadDim: uint32(p.head_dim),
		VocabSize: uint32(p.vocab_size), MaxSeqLen: uint32(p.max_seq_len),
		RMSEps: float32(p.rms_eps), RopeTheta: float32(p.rope_theta), RopeStyle: int32(p.rope_style),
		QKNorm: p.qk_norm != 0, Backend: Backend(p.backend), DeviceIndex: int32(p.device_index),
		NThreads: int32(p.n_threads), NDevices: uint32(p.n_devices), DeviceMask: uint32(p.device_mask),
		LogLevel: int32(p.log_level),
	}, nil
}

// progressState is what the C trampoline reaches through a cgo.Handle.
type progressState struct {
	fn       func(done, total uint64)
	panicked bool
	value    interface{} // what fn panicked with
}

// NewContext creates a context holding this whole model, ready to prefill.
// progress (may be nil) is called during the upload with the bytes handed to
// the library so far and in all. If progress panics, it is not called again,
// the half-made context is destroyed, and the panic is raised again in the
// caller's goroutine once the upload has returned (it never unwinds through C).
func (f *ModelFile) NewContext(o ExecOptions, progress func(done, total uint64)) (*Context, error) {
	p, err := f.Params(o)
	if err != nil {
		return nil, err
	}
	c, err := NewContext(p)
	if err != nil {
		return nil, err
	}
	var state *progressState
	var h cgo.Handle
	if progress != nil {
		state = &progressState{fn: progress}
		h = cgo.NewHandle(state)
		defer h.Delete()
	}
	err = f.use(func(g *C.qsp_gguf) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		var msg *C.char
		// The message is qsp_gguf_last_error's: it names the tensor.
		return takeMessage(C.goqsp_gguf_upload(g, c.ptr, C.uintptr_t(h), &msg), msg)
	})
	if state != nil && state.panicked {
		c.Close()
		panic(state.value)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// NewContextFromGGUF opens the GGUF file at path and returns a context holding
// its whole model, ready to prefill (ModelFile.NewContext, then Close).
func NewContextFromGGUF(path string, o ExecOptions, progress func(done, total uint64)) (*Context, error) {
	f, err := OpenModelFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.NewContext(o, progress)
}

// GGUFTypeName is the name of a GGML type id ("q4_0", "q6_K", ...); "unknown" otherwise.
func GGUFTypeName(ggmlType int32) string {
	return C.GoString(C.qsp_gguf_type_name(C.int32_t(ggmlType)))
}
