package qsp

// Tests of the Go binding (run by ctest as bindings.go).
//
// Environment (set by bindings/CMakeLists.txt):
//   QSP_REF_LOGITS    logits written by bindings/common/ref_logits.c
//   QSP_FAKE_ABI_DIR  a directory with a stub libqsp.so.1 reporting ABI 2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const base = 0x5153500000000000

var tokens = []int32{1, 7, 42, 100, 255, 0, 128, 64, 3, 200}

const nTensors = 2*11 + 3

// gen makes one tensor of tiny-v1 (bindings/common/MODEL.md).
func gen(handle uint64, dt DType, rows, cols uint64) *Tensor {
	s := handle * 0x9E3779B97F4A7C15
	next := func() uint64 {
		x := s
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		s = x
		return x
	}
	var b []byte
	switch dt {
	case F32:
		for i := uint64(0); i < rows*cols; i++ {
			b = binary.LittleEndian.AppendUint32(b, 0x3F000000|uint32(next()>>41))
		}
	case Q8_0:
		for i := uint64(0); i < rows*cols/32; i++ {
			b = binary.LittleEndian.AppendUint16(b, uint16(0x1400|(next()&0x3FF)))
			for k := 0; k < 4; k++ {
				b = binary.LittleEndian.AppendUint64(b, next())
			}
		}
	case Q4_0:
		for i := uint64(0); i < rows*cols/32; i++ {
			b = binary.LittleEndian.AppendUint16(b, uint16(0x2000|(next()&0x3FF)))
			for k := 0; k < 2; k++ {
				b = binary.LittleEndian.AppendUint64(b, next())
			}
		}
	default:
		panic("dtype")
	}
	if uint64(len(b)) != dt.Size(rows, cols) {
		panic("size")
	}
	return &Tensor{Handle: handle, Dtype: dt, NRows: rows, NCols: cols, Data: b}
}

type model struct {
	layers           []*LayerWeights
	embd, norm, head *Tensor
}

func params() Params {
	p := DefaultParams()
	p.NLayers, p.HiddenSize, p.IntermediateSize = 2, 64, 128
	p.NHeads, p.NKVHeads, p.HeadDim = 4, 2, 16
	p.VocabSize, p.MaxSeqLen = 256, 32
	p.Backend, p.NThreads = BackendCPU, 2
	return p
}

func newModel() *model {
	const h, f, d, q, kv = 64, 128, 16, 64, 32
	m := &model{}
	for l := uint64(0); l < 2; l++ {
		wt := Q4_0
		if l%2 == 1 {
			wt = Q8_0
		}
		b := base + 0x100*(l+1)
		m.layers = append(m.layers, &LayerWeights{
			AttnNorm: gen(b+0, F32, 1, h), WQ: gen(b+1, wt, q, h), WK: gen(b+2, wt, kv, h), WV: gen(b+3, wt, kv, h),
			QNorm: gen(b+4, F32, 1, d), KNorm: gen(b+5, F32, 1, d), WO: gen(b+6, wt, h, q),
			FFNNorm: gen(b+7, F32, 1, h), WGate: gen(b+8, wt, f, h), WUp: gen(b+9, wt, f, h), WDown: gen(b+10, wt, h, f),
		})
	}
	m.embd = gen(base+1, Q8_0, 256, h)
	m.norm = gen(base+2, F32, 1, h)
	m.head = gen(base+3, Q4_0, 256, h)
	return m
}

func (m *model) context(t testing.TB) *Context {
	t.Helper()
	return m.contextWith(t, params())
}

func (m *model) contextWith(t testing.TB, p Params) *Context {
	t.Helper()
	c, err := NewContext(p)
	if err != nil {
		t.Fatal(err)
	}
	for l, w := range m.layers {
		if err := c.UploadLayer(uint32(l), w); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.UploadEmbedding(m.embd); err != nil {
		t.Fatal(err)
	}
	if err := c.UploadOutput(m.norm, m.head); err != nil {
		t.Fatal(err)
	}
	return c
}

func f32bytes(v []float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// must unwraps (v, err); an error panics, which fails the running test.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestVersions(t *testing.T) {
	if err := CheckABI(); err != nil {
		t.Fatal(err)
	}
	if LibraryABIVersion() != ABIVersion || strings.Count(Version(), ".") != 2 {
		t.Fatalf("abi %d version %q", LibraryABIVersion(), Version())
	}
	if StatusOutOfRange.String() != "out of range" || Q4_0.String() != "q4_0" || Q8_0.Size(2, 64) != 2*2*34 {
		t.Fatal("status/dtype helpers")
	}
	for c := int32(-20); c <= 0; c++ { // the package's copy of the descriptions is the library's
		if Status(c).String() != StatusString(c) {
			t.Fatalf("status %d: %q, library %q", c, Status(c).String(), StatusString(c))
		}
	}
	if !BackendCPU.Available() {
		t.Fatal("CPU backend unavailable")
	}
	if p := DefaultParams(); p.RopeTheta != 1e6 || !p.QKNorm || p.RopeStyle != RopeNeox {
		t.Fatalf("defaults %+v", p)
	}
}

func TestLogitsBitExact(t *testing.T) {
	m := newModel()
	c := m.context(t)
	defer c.Close()
	info := must(c.Info())
	if info.Backend != BackendCPU || info.NThreads != 2 || info.DeviceName == "" {
		t.Fatalf("info %+v", info)
	}
	if err := c.Prefill(tokens); err != nil {
		t.Fatal(err)
	}
	if n := must(c.KVLength()); n != uint32(len(tokens)) {
		t.Fatalf("kv length %d", n)
	}
	logits := must(c.Logits())
	view := must(c.LogitsView())
	if len(logits) != 256 || !bytes.Equal(f32bytes(logits), f32bytes(view)) {
		t.Fatal("copy and view differ")
	}
	if path := os.Getenv("QSP_REF_LOGITS"); path != "" {
		ref, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f32bytes(logits), ref) {
			t.Fatal("logits differ from the C API's")
		}
	} else {
		t.Log("QSP_REF_LOGITS not set (ctest sets it): comparison skipped")
	}
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if g := must(c.GreedyToken()); g != int32(best) {
		t.Fatalf("greedy %d, argmax %d", g, best)
	}
	// Truncate and continue: the same logits.
	if err := c.KVTruncate(4); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Logits(); StatusOf(err) != StatusNotReady {
		t.Fatalf("logits after truncate: %v", err)
	}
	if err := c.Prefill(tokens[4:]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f32bytes(must(c.Logits())), f32bytes(logits)) {
		t.Fatal("chunked prefill differs")
	}
	if err := c.KVClear(); err != nil || must(c.KVLength()) != 0 {
		t.Fatal("kv clear", err)
	}
}

func TestErrorsCarryStatusAndMessage(t *testing.T) {
	m := newModel()
	c := m.context(t)
	defer c.Close()
	err := c.UploadLayer(5, m.layers[0])
	var qe *Error
	if !errors.As(err, &qe) || qe.Status != StatusOutOfRange {
		t.Fatalf("want an out-of-range *Error, got %v", err)
	}
	if qe.Message != "layer 5 out of range (the model has 2 layers)" || qe.Message != c.LastError() {
		t.Fatalf("message %q / last error %q", qe.Message, c.LastError())
	}
	if !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), "layer 5") {
		t.Fatalf("Error() = %q", err.Error())
	}
	err = c.Prefill([]int32{1, 256})
	if StatusOf(err) != StatusOutOfRange || !strings.Contains(err.(*Error).Message, "256") {
		t.Fatalf("bad token: %v", err)
	}
	if n := must(c.KVLength()); n != 0 {
		t.Fatalf("failed prefill changed the kv length to %d", n)
	}
	if err := c.Prefill(nil); StatusOf(err) != StatusInvalidArgument {
		t.Fatalf("empty prefill: %v", err)
	}
	bad := *m.norm
	bad.Data = bad.Data[:len(bad.Data)-4]
	if err := c.UploadOutput(&bad, m.head); StatusOf(err) != StatusDType || !strings.Contains(err.Error(), "output_norm") {
		t.Fatalf("short tensor: %v", err)
	}
	if err := c.PrefillEmbeddings(make([]float32, 65)); StatusOf(err) != StatusInvalidArgument {
		t.Fatalf("ragged embeddings: %v", err)
	}
	// Global calls: the message is copied from the calling OS thread.
	p := params()
	p.NLayers = 0
	if _, err := NewContext(p); StatusOf(err) != StatusShape || err.(*Error).Message != "n_layers must be > 0" {
		t.Fatalf("bad params: %v", err)
	}
	if _, err := GetCacheStats(BackendAuto, 0); StatusOf(err) != StatusInvalidArgument {
		t.Fatalf("cache stats: %v", err)
	}
	c2 := must(NewContext(params()))
	c2.Close()
	c2.Close()
	if err := c2.Prefill(tokens); StatusOf(err) != StatusInvalidArgument {
		t.Fatalf("closed context: %v", err)
	}
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := strconv.ParseInt(strings.Fields(string(b))[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func nTensorsNow(t *testing.T) uint64 {
	return must(GetCacheStats(BackendCPU, 0)).NTensors
}

func TestClosingContextsLeaksNothing(t *testing.T) {
	m := newModel()
	baseline := nTensorsNow(t)
	cycle := func() {
		c := m.context(t)
		if err := c.Prefill(tokens[:3]); err != nil {
			t.Fatal(err)
		}
		must(c.Logits())
		if n := nTensorsNow(t); n != baseline+nTensors {
			t.Fatalf("%d tensors cached with a context alive, want %d", n, baseline+nTensors)
		}
		c.Close()
	}
	for i := 0; i < 20; i++ {
		cycle()
	}
	runtime.GC()
	rss0 := rss(t)
	for i := 0; i < 200; i++ {
		cycle()
	}
	runtime.GC()
	if n := nTensorsNow(t); n != baseline {
		t.Fatalf("%d tensors cached after closing every context, want %d", n, baseline)
	}
	if grown := rss(t) - rss0; grown > 8<<20 {
		t.Fatalf("RSS grew by %d bytes over 200 contexts", grown)
	}
}

func TestFinalizerFreesForgottenContexts(t *testing.T) {
	m := newModel()
	baseline := nTensorsNow(t)
	for i := 0; i < 50; i++ {
		c := m.context(t)
		if err := c.Prefill(tokens[:2]); err != nil {
			t.Fatal(err)
		}
		// not closed: left to the finalizer
	}
	deadline := time.Now().Add(10 * time.Second)
	for nTensorsNow(t) != baseline {
		if time.Now().After(deadline) {
			t.Fatalf("%d tensors still cached, want %d: finalizers did not free the contexts", nTensorsNow(t), baseline)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestABIChild runs in a child process with the stub library first on
// LD_LIBRARY_PATH (see TestABIMismatchIsRefused).
func TestABIChild(t *testing.T) {
	if os.Getenv("QSP_ABI_CHILD") == "" {
		t.Skip("only in the child process")
	}
	_, err := NewContext(params())
	if StatusOf(err) != StatusUnsupported || err != CheckABI() {
		t.Fatalf("NewContext against ABI 2: %v", err)
	}
	os.Stdout.WriteString("ABI-CHILD: " + err.(*Error).Message + "\n")
}

func TestABIMismatchIsRefused(t *testing.T) {
	dir := os.Getenv("QSP_FAKE_ABI_DIR")
	if dir == "" {
		t.Skip("QSP_FAKE_ABI_DIR not set (ctest sets it)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestABIChild$", "-test.v")
	cmd.Env = append(os.Environ(), "QSP_ABI_CHILD=1", "LD_LIBRARY_PATH="+dir+":"+os.Getenv("LD_LIBRARY_PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "ABI-CHILD: ABI mismatch: the loaded libqsp has ABI version 2, but this Go package was written for ABI version 1"
	if !strings.Contains(string(out), want) {
		t.Fatalf("child output lacks %q:\n%s", want, out)
	}
}

// ---- tensor parallelism (NDevices / DeviceMask, libqsp >= 1.3) ----------------------
// tiny-v1 splits in two (2 KV heads, 128 FFN features; 32 columns of wo and
// 64 of w_down per shard: whole blocks). The CPU runs the shards one after
// another: logits bit for bit the unsplit model's.

func splitParams(nDevices, deviceMask uint32) Params {
	p := params()
	p.NDevices, p.DeviceMask = nDevices, deviceMask
	return p
}

func TestSplitParamsDefaultToUnsplit(t *testing.T) {
	if p := DefaultParams(); p.NDevices != 0 || p.DeviceMask != 0 {
		t.Fatalf("defaults NDevices %d DeviceMask %d, want 0 0", p.NDevices, p.DeviceMask)
	}
	if p := splitParams(2, 1); p.NDevices != 2 || p.DeviceMask != 1 {
		t.Fatalf("NDevices %d DeviceMask %d, want 2 1", p.NDevices, p.DeviceMask)
	}
}

func TestSplitInTwoIsBitIdentical(t *testing.T) {
	m := newModel()
	whole := m.context(t)
	defer whole.Close()
	if err := whole.Prefill(tokens); err != nil {
		t.Fatal(err)
	}
	want := f32bytes(must(whole.Logits()))
	if path := os.Getenv("QSP_REF_LOGITS"); path != "" {
		if ref := must(os.ReadFile(path)); !bytes.Equal(want, ref) {
			t.Fatal("unsplit logits differ from the C API's")
		}
	}
	// DeviceMask 0 (devices from DeviceIndex on) and one bit (every shard on
	// that device): both reach the library, which says how many shards.
	for _, mask := range []uint32{0, 1} {
		c := m.contextWith(t, splitParams(2, mask))
		info := must(c.Info())
		if !strings.Contains(info.DeviceName, "2 shards") || info.KVCacheBytes != must(whole.Info()).KVCacheBytes {
			t.Fatalf("mask %#x: info %+v", mask, info)
		}
		if err := c.Prefill(tokens); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f32bytes(must(c.Logits())), want) {
			t.Fatalf("mask %#x: logits differ from the unsplit model's", mask)
		}
		if g, w := must(c.GreedyToken()), must(whole.GreedyToken()); g != w {
			t.Fatalf("mask %#x: greedy token %d, unsplit %d", mask, g, w)
		}
		c.Close()
	}
}

func TestSplitThatDoesNotDivideIsRefused(t *testing.T) {
	// 2 KV heads over 3 shards.
	_, err := NewContext(splitParams(3, 0))
	if StatusOf(err) != StatusShape || !strings.Contains(err.Error(), "n_kv_heads 2 does not divide over n_devices = 3") {
		t.Fatalf("3 shards: %v", err)
	}
	// A DeviceMask naming 3 devices for 2 shards.
	_, err = NewContext(splitParams(2, 0b111))
	if StatusOf(err) != StatusInvalidArgument || !strings.Contains(err.Error(), "device_mask 0x7") {
		t.Fatalf("mask 0x7: %v", err)
	}
}
