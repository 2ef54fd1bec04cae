package qsp

// PrefillBatch (qsp_prefill_batch, libqsp >= 1.1) against single prefills: a
// prompt, a decode step on an existing cache and an embeddings piece must
// leave each context exactly as Prefill / PrefillEmbeddings do (CPU: bit for
// bit); an invalid batch returns an *Error naming the sequence and changes
// nothing.

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// hiddenStates is n x 64 exact float32 values (multiples of 1/64).
func hiddenStates(n int) []float32 {
	h := make([]float32, n*64)
	for i := range h {
		h[i] = float32((i*37)%101-50) / 64
	}
	return h
}

type ctxState struct {
	kv     uint32
	logits []byte // nil: no logits
	greedy int32
}

func stateOf(t *testing.T, c *Context) ctxState {
	t.Helper()
	s := ctxState{kv: must(c.KVLength())}
	l, err := c.Logits()
	if err != nil {
		if StatusOf(err) != StatusNotReady {
			t.Fatal(err)
		}
		return s
	}
	s.logits = f32bytes(l)
	s.greedy = must(c.GreedyToken())
	return s
}

func (s ctxState) equal(o ctxState) bool {
	return s.kv == o.kv && bytes.Equal(s.logits, o.logits) && s.greedy == o.greedy
}

// trio is three contexts: empty, with tokens[:6] cached, empty.
func trio(t *testing.T, m *model) []*Context {
	cs := []*Context{m.context(t), m.context(t), m.context(t)}
	if err := cs[1].Prefill(tokens[:6]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func TestPrefillBatchEqualsSinglePrefills(t *testing.T) {
	m := newModel()
	b := trio(t, m)
	embd := hiddenStates(3)
	err := PrefillBatch([]BatchPiece{
		{Ctx: b[0], Tokens: tokens},
		{Ctx: b[1], Tokens: tokens[6:7]},
		{Ctx: b[2], Embeddings: embd},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := trio(t, m)
	for _, e := range []error{s[0].Prefill(tokens), s[1].Prefill(tokens[6:7]), s[2].PrefillEmbeddings(embd)} {
		if e != nil {
			t.Fatal(e)
		}
	}
	for i := range b {
		got, want := stateOf(t, b[i]), stateOf(t, s[i])
		if want.logits == nil || !got.equal(want) {
			t.Fatalf("piece %d: batch kv %d greedy %d, single kv %d greedy %d (logits equal: %v)",
				i, got.kv, got.greedy, want.kv, want.greedy, bytes.Equal(got.logits, want.logits))
		}
	}
	if k := []uint32{must(b[0].KVLength()), must(b[1].KVLength()), must(b[2].KVLength())}; k[0] != 10 || k[1] != 7 || k[2] != 3 {
		t.Fatalf("kv lengths %v", k)
	}
	if path := os.Getenv("QSP_REF_LOGITS"); path != "" {
		ref := must(os.ReadFile(path))
		if !bytes.Equal(stateOf(t, b[0]).logits, ref) {
			t.Fatal("the batch's prompt logits differ from ref_logits.c's")
		}
	}
	l := must(b[0].Logits())
	best := 0
	for i, x := range l {
		if x > l[best] {
			best = i
		}
	}
	if must(b[0].GreedyToken()) != int32(best) {
		t.Fatalf("greedy %d, argmax %d", must(b[0].GreedyToken()), best)
	}
}

func TestPrefillBatchInvalidChangesNothing(t *testing.T) {
	b := trio(t, newModel())
	if err := PrefillBatch([]BatchPiece{{Ctx: b[0], Tokens: tokens[:4]}, {Ctx: b[2], Tokens: []int32{5}}}); err != nil {
		t.Fatal(err)
	}
	before := []ctxState{stateOf(t, b[0]), stateOf(t, b[1]), stateOf(t, b[2])}
	unchanged := func(what string) {
		t.Helper()
		for i, c := range b {
			if !stateOf(t, c).equal(before[i]) {
				t.Fatalf("%s: context %d changed", what, i)
			}
		}
	}
	cases := []struct {
		name   string
		pieces []BatchPiece
		status Status
		msg    string
	}{
		{"token out of range in sequence 1", []BatchPiece{
			{Ctx: b[0], Tokens: []int32{3}}, {Ctx: b[1], Tokens: []int32{4, 256}}, {Ctx: b[2], Tokens: []int32{5}}},
			StatusOutOfRange, "sequence 1"},
		{"the same context twice", []BatchPiece{{Ctx: b[1], Tokens: []int32{3}}, {Ctx: b[1], Tokens: []int32{4}}},
			StatusInvalidArgument, "sequence 1"},
		{"tokens and embeddings both", []BatchPiece{{Ctx: b[0], Tokens: []int32{3}}, {Ctx: b[2], Tokens: []int32{1}, Embeddings: hiddenStates(1)}},
			StatusInvalidArgument, "sequence 1"},
		{"embeddings not whole rows", []BatchPiece{{Ctx: b[0], Tokens: []int32{3}}, {Ctx: b[2], Embeddings: make([]float32, 70)}},
			StatusInvalidArgument, "sequence 1"},
		{"no context", []BatchPiece{{Ctx: b[0], Tokens: []int32{3}}, {Tokens: []int32{4}}}, StatusInvalidArgument, "sequence 1"},
		{"no pieces", nil, StatusInvalidArgument, "no pieces"},
	}
	for _, tc := range cases {
		err := PrefillBatch(tc.pieces)
		if StatusOf(err) != tc.status || !strings.Contains(err.(*Error).Message, tc.msg) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
		unchanged(tc.name)
	}
	// All still usable.
	if err := PrefillBatch([]BatchPiece{{Ctx: b[0], Tokens: []int32{9}}, {Ctx: b[1], Tokens: []int32{9}}, {Ctx: b[2], Tokens: []int32{9}}}); err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		if must(c.KVLength()) != before[i].kv+1 {
			t.Fatalf("context %d: kv %d", i, must(c.KVLength()))
		}
	}
}

func TestPrefillBatchClosedContext(t *testing.T) {
	m := newModel()
	a, c := m.context(t), m.context(t)
	defer a.Close()
	c.Close()
	err := PrefillBatch([]BatchPiece{{Ctx: a, Tokens: []int32{1}}, {Ctx: c, Tokens: []int32{2}}})
	if StatusOf(err) != StatusInvalidArgument || !strings.Contains(err.Error(), "sequence 1: the Context is closed") {
		t.Fatal(err)
	}
	if must(a.KVLength()) != 0 {
		t.Fatal("a changed")
	}
}
