package qsp_test

import (
	"errors"
	"fmt"

	"qsp"
)

// tensor makes an F32 tensor: norm vectors are 1.0, matrices
// ((31 i + 17 handle) mod 23 - 11) / 64.
func tensor(handle, rows, cols uint64) *qsp.Tensor {
	v := make([]float32, rows*cols)
	for i := range v {
		if rows == 1 {
			v[i] = 1
		} else {
			v[i] = float32(int((31*uint64(i)+17*handle)%23)-11) / 64
		}
	}
	return &qsp.Tensor{Handle: handle, Dtype: qsp.F32, NRows: rows, NCols: cols, Data: qsp.F32Bytes(v)}
}

// A one-layer model with F32 weights from a formula: prefill six tokens,
// print the greedy next token, and show an error.
func Example() {
	p := qsp.DefaultParams()
	p.NLayers, p.HiddenSize, p.IntermediateSize = 1, 32, 64
	p.NHeads, p.NKVHeads, p.HeadDim = 2, 1, 16
	p.VocabSize, p.MaxSeqLen = 64, 16
	p.Backend, p.NThreads = qsp.BackendCPU, 1
	ctx, err := qsp.NewContext(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Close()

	const h, f, d, q, kv, vocab = 32, 64, 16, 32, 16, 64
	layer := &qsp.LayerWeights{
		AttnNorm: tensor(0x100, 1, h), WQ: tensor(0x101, q, h), WK: tensor(0x102, kv, h), WV: tensor(0x103, kv, h),
		QNorm: tensor(0x104, 1, d), KNorm: tensor(0x105, 1, d), WO: tensor(0x106, h, q), FFNNorm: tensor(0x107, 1, h),
		WGate: tensor(0x108, f, h), WUp: tensor(0x109, f, h), WDown: tensor(0x10A, h, f),
	}
	if err := ctx.UploadLayer(0, layer); err != nil {
		fmt.Println(err)
		return
	}
	if err := ctx.UploadEmbedding(tensor(0x120, vocab, h)); err != nil {
		fmt.Println(err)
		return
	}
	if err := ctx.UploadOutput(tensor(0x121, 1, h), tensor(0x122, vocab, h)); err != nil {
		fmt.Println(err)
		return
	}
	if err := ctx.Prefill([]int32{3, 14, 15, 9, 2, 6}); err != nil {
		fmt.Println(err)
		return
	}
	logits, _ := ctx.Logits() // a copy; LogitsView borrows without copying
	next, _ := ctx.GreedyToken()
	fmt.Println(len(logits), "logits; greedy next token:", next)

	err = ctx.UploadLayer(1, layer) // the model has one layer
	var qe *qsp.Error
	if errors.As(err, &qe) {
		fmt.Println("error:", qe.Status, "-", qe.Message)
	}
	// Output:
	// 64 logits; greedy next token: 4
	// error: out of range - layer 1 out of range (the model has 1 layers)
}

// handBuilt is the one-layer model of Example in a new context.
func handBuilt() (*qsp.Context, error) {
	p := qsp.DefaultParams()
	p.NLayers, p.HiddenSize, p.IntermediateSize = 1, 32, 64
	p.NHeads, p.NKVHeads, p.HeadDim = 2, 1, 16
	p.VocabSize, p.MaxSeqLen = 64, 16
	p.Backend, p.NThreads = qsp.BackendCPU, 1
	ctx, err := qsp.NewContext(p)
	if err != nil {
		return nil, err
	}
	const h, f, d, q, kv, vocab = 32, 64, 16, 32, 16, 64
	err = ctx.UploadLayer(0, &qsp.LayerWeights{
		AttnNorm: tensor(0x100, 1, h), WQ: tensor(0x101, q, h), WK: tensor(0x102, kv, h), WV: tensor(0x103, kv, h),
		QNorm: tensor(0x104, 1, d), KNorm: tensor(0x105, 1, d), WO: tensor(0x106, h, q), FFNNorm: tensor(0x107, 1, h),
		WGate: tensor(0x108, f, h), WUp: tensor(0x109, f, h), WDown: tensor(0x10A, h, f),
	})
	if err == nil {
		err = ctx.UploadEmbedding(tensor(0x120, vocab, h))
	}
	if err == nil {
		err = ctx.UploadOutput(tensor(0x121, 1, h), tensor(0x122, vocab, h))
	}
	if err != nil {
		ctx.Close()
		return nil, err
	}
	return ctx, nil
}

// A serving loop: three requests, one context each (the same weights), and
// every step one PrefillBatch call — each request's prompt first, then one
// token each (its greedy token). A server adds new requests' prompts to the
// same batch as they arrive and drops finished ones.
func ExamplePrefillBatch() {
	prompts := [][]int32{{3, 14, 15, 9}, {2, 6}, {5, 35, 8, 9, 7, 9}}
	var pieces []qsp.BatchPiece
	for _, prompt := range prompts {
		ctx, err := handBuilt()
		if err != nil {
			fmt.Println(err)
			return
		}
		defer ctx.Close()
		pieces = append(pieces, qsp.BatchPiece{Ctx: ctx, Tokens: prompt})
	}
	out := make([][]int32, len(prompts))
	for step := 0; step < 3; step++ {
		if err := qsp.PrefillBatch(pieces); err != nil { // prompts and decode steps in one call
			fmt.Println(err)
			return
		}
		for i := range pieces {
			next, _ := pieces[i].Ctx.GreedyToken()
			out[i] = append(out[i], next)
			pieces[i].Tokens = []int32{next} // the next step: one token each
		}
	}
	for i, o := range out {
		fmt.Println("request", i, o)
	}
	// Output:
	// request 0 [5 2 14]
	// request 1 [10 14 11]
	// request 2 [5 2 22]
}
