package qsp

// GGUF model files (issue 20), against what the ctest fixture wrote (see
// bindings/gguf/gguf_ref.c): QSP_GGUF_MODEL (`qsp synth --preset tiny --type
// q4_0`), QSP_GGUF_REF_LOGITS (its logits, bit-identical to `qsp prefill`'s),
// QSP_GGUF_REF_INFO, QSP_GGUF_BAD_DIR (bad files), QSP_GGUF_TOKENS.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func ggufEnv(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set (ctest sets it)", name)
	}
	return v
}

func ggufTokens(t *testing.T) []int32 {
	var out []int32
	for _, s := range strings.Split(ggufEnv(t, "QSP_GGUF_TOKENS"), ",") {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int32(v))
	}
	return out
}

func cpuOpts(threads int32) ExecOptions { return ExecOptions{Backend: BackendCPU, NThreads: threads} }

func TestGGUFInfoAndTensors(t *testing.T) {
	b, err := os.ReadFile(ggufEnv(t, "QSP_GGUF_REF_INFO"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		want[k] = v
	}
	f := must(OpenModelFile(ggufEnv(t, "QSP_GGUF_MODEL")))
	defer f.Close()
	i := must(f.Info())
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	got := map[string]interface{}{
		"version": i.Version, "file_size": i.FileSize, "tensor_count": i.TensorCount, "kv_count": i.KVCount,
		"data_offset": i.DataOffset, "weight_bytes": i.WeightBytes, "alignment": i.Alignment,
		"known_architecture": b2i(i.KnownArchitecture), "architecture": i.Architecture, "name": i.Name,
		"n_layers": i.NLayers, "hidden_size": i.HiddenSize, "intermediate_size": i.IntermediateSize,
		"n_heads": i.NHeads, "n_kv_heads": i.NKVHeads, "head_dim": i.HeadDim, "vocab_size": i.VocabSize,
		"context_length": i.ContextLength, "rope_style": i.RopeStyle, "qk_norm": i.QKNorm,
		"tied_embeddings": b2i(i.TiedEmbeddings), "file_type": i.FileType,
	}
	for k, v := range got {
		if s := fmt.Sprint(v); s != want[k] {
			t.Errorf("%s = %s, want %s", k, s, want[k])
		}
	}
	ts := must(f.Tensors())
	if fmt.Sprint(len(ts)) != want["tensor_count"] {
		t.Fatalf("%d tensors", len(ts))
	}
	t0 := ts[0]
	if t0.Name != want["tensor0_name"] || fmt.Sprint(int32(t0.Type)) != want["tensor0_type"] || t0.Type != Q4_0 ||
		t0.TypeName != want["tensor0_type_name"] || fmt.Sprint(t0.NRows) != want["tensor0_n_rows"] ||
		fmt.Sprint(t0.NCols) != want["tensor0_n_cols"] || fmt.Sprint(t0.NBytes) != want["tensor0_n_bytes"] ||
		len(t0.Shape) != 2 || t0.Shape[0] != t0.NCols || t0.Shape[1] != t0.NRows {
		t.Errorf("tensor 0: %+v, want %v", t0, want)
	}
	if t1 := must(f.Tensor(t0.Name)); t1.Name != t0.Name || t1.Offset != t0.Offset || t1.Handle != t0.Handle {
		t.Errorf("Tensor(%q) = %+v", t0.Name, t1)
	}
	if _, err := f.Tensor("no.such.tensor"); StatusOf(err) != StatusOutOfRange {
		t.Errorf("missing tensor: %v", err)
	}
	var sum uint64
	for _, x := range ts {
		sum += x.NBytes
	}
	if sum != i.WeightBytes {
		t.Errorf("tensor bytes %d, weight_bytes %d", sum, i.WeightBytes)
	}
	f.Close()
	if _, err := f.Info(); StatusOf(err) != StatusInvalidArgument {
		t.Errorf("closed file: %v", err)
	}
}

func TestGGUFLogitsIdenticalToC(t *testing.T) {
	want, err := os.ReadFile(ggufEnv(t, "QSP_GGUF_REF_LOGITS"))
	if err != nil {
		t.Fatal(err)
	}
	toks := ggufTokens(t)
	c := must(NewContextFromGGUF(ggufEnv(t, "QSP_GGUF_MODEL"), cpuOpts(2), nil))
	defer c.Close()
	if err := c.Prefill(toks); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(F32Bytes(must(c.Logits())), want) {
		t.Fatal("logits differ from the C reference")
	}

	// Through an open file, with a short context and progress reports.
	f := must(OpenModelFile(ggufEnv(t, "QSP_GGUF_MODEL")))
	var seen [][2]uint64
	c2 := must(f.NewContext(ExecOptions{Backend: BackendCPU, NThreads: 2, ContextLength: 64},
		func(done, total uint64) { seen = append(seen, [2]uint64{done, total}) }))
	f.Close() // the context does not need the file
	defer c2.Close()
	if err := c2.Prefill(toks); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(F32Bytes(must(c2.Logits())), want) {
		t.Fatal("logits (second context) differ from the C reference")
	}
	if len(seen) == 0 {
		t.Fatal("no progress reported")
	}
	for k := range seen {
		if seen[k][1] != seen[0][1] || (k > 0 && seen[k][0] <= seen[k-1][0]) {
			t.Fatalf("progress not increasing with one total: %v", seen)
		}
	}
	if last := seen[len(seen)-1]; last[0] != last[1] {
		t.Fatalf("progress ends at %d of %d", last[0], last[1])
	}
}

// The model file split in two (ExecOptions' NDevices / DeviceMask reach the
// context): the same logits bit for bit.
func TestGGUFSplitContextIdenticalToC(t *testing.T) {
	want, err := os.ReadFile(ggufEnv(t, "QSP_GGUF_REF_LOGITS"))
	if err != nil {
		t.Fatal(err)
	}
	toks := ggufTokens(t)
	f := must(OpenModelFile(ggufEnv(t, "QSP_GGUF_MODEL")))
	defer f.Close()
	if p := must(f.Params(cpuOpts(2))); p.NDevices != 0 || p.DeviceMask != 0 {
		t.Fatalf("default NDevices %d DeviceMask %d", p.NDevices, p.DeviceMask)
	}
	opts := ExecOptions{Backend: BackendCPU, NThreads: 2, NDevices: 2, DeviceMask: 1}
	if p := must(f.Params(opts)); p.NDevices != 2 || p.DeviceMask != 1 {
		t.Fatalf("NDevices %d DeviceMask %d, want 2 1", p.NDevices, p.DeviceMask)
	}
	c := must(f.NewContext(opts, nil))
	defer c.Close()
	if info := must(c.Info()); !strings.Contains(info.DeviceName, "2 shards") {
		t.Fatalf("device name %q", info.DeviceName)
	}
	opts.DeviceMask = 0
	c2 := must(NewContextFromGGUF(ggufEnv(t, "QSP_GGUF_MODEL"), opts, nil))
	defer c2.Close()
	for _, ctx := range []*Context{c, c2} {
		if err := ctx.Prefill(toks); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(F32Bytes(must(ctx.Logits())), want) {
			t.Fatal("split logits differ from the C reference")
		}
	}
}

func TestGGUFBadFiles(t *testing.T) {
	dir := ggufEnv(t, "QSP_GGUF_BAD_DIR")
	for _, c := range []struct {
		name   string
		status Status
		words  string
	}{
		{"missing.gguf", StatusIO, "missing.gguf"},
		{"bad_truncated.gguf", StatusBadFormat, ""},
		{"bad_magic.gguf", StatusBadFormat, ""},
		{"bad_type.gguf", StatusUnsupported, "iq4_nl"},
	} {
		_, err := NewContextFromGGUF(filepath.Join(dir, c.name), cpuOpts(1), nil)
		e, ok := err.(*Error)
		if !ok || e.Status != c.status || e.Message == "" || !strings.Contains(e.Message, c.words) {
			t.Errorf("%s: %v, want status %v with the library's message", c.name, err, c.status)
		}
	}
}

func TestGGUFPanickingProgressIsRaisedAgainAndLeavesNothing(t *testing.T) {
	base := nTensorsNow(t)
	f := must(OpenModelFile(ggufEnv(t, "QSP_GGUF_MODEL")))
	defer f.Close()
	for k := 0; k < 3; k++ {
		calls := 0
		got := func() (r interface{}) {
			defer func() { r = recover() }()
			f.NewContext(cpuOpts(1), func(done, total uint64) {
				calls++
				if calls == 2 {
					panic(fmt.Sprintf("enough after %d of %d bytes", done, total))
				}
			})
			return nil
		}()
		if s, ok := got.(string); !ok || !strings.HasPrefix(s, "enough after") {
			t.Fatalf("recovered %v, want the callback's panic", got)
		}
		if calls != 2 {
			t.Fatalf("the callback ran %d times; it must not run again after panicking", calls)
		}
		if n := nTensorsNow(t); n != base {
			t.Fatalf("%d tensors cached after the panic, want %d: the half-made context was not destroyed", n, base)
		}
	}
}

// mappings counts the mappings of path in this process.
func mappings(t *testing.T, path string) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	return strings.Count(string(b), abs)
}

func TestGGUFFilesAndContextsLeakNothing(t *testing.T) {
	base := nTensorsNow(t)
	path, toks := ggufEnv(t, "QSP_GGUF_MODEL"), ggufTokens(t)
	opts := ExecOptions{Backend: BackendCPU, NThreads: 1, ContextLength: 16}
	cycle := func(close bool) {
		f := must(OpenModelFile(path))
		if mappings(t, path) == 0 {
			t.Fatal("the open file is not in /proc/self/maps")
		}
		c := must(f.NewContext(opts, func(uint64, uint64) {}))
		if err := c.Prefill(toks[:2]); err != nil {
			t.Fatal(err)
		}
		if close {
			c.Close()
			f.Close()
		}
	}
	for i := 0; i < 10; i++ {
		cycle(true)
	}
	runtime.GC()
	rss0 := rss(t)
	for i := 0; i < 100; i++ {
		cycle(true)
	}
	if n := nTensorsNow(t); n != base {
		t.Fatalf("%d tensors cached after closing every context, want %d", n, base)
	}
	if m := mappings(t, path); m != 0 {
		t.Fatalf("%d mappings of the model file after closing every file", m)
	}
	if grown := rss(t) - rss0; grown > 8<<20 {
		t.Fatalf("RSS grew by %d bytes over 100 files and contexts", grown)
	}

	// Left to the finalizers: the contexts' weights and the files' mappings go.
	for i := 0; i < 30; i++ {
		cycle(false)
	}
	deadline := time.Now().Add(10 * time.Second)
	for nTensorsNow(t) != base || mappings(t, path) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tensors cached (want %d), %d mappings of the file (want 0): finalizers did not free them",
				nTensorsNow(t), base, mappings(t, path))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
