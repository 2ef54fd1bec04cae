// Command gguf_prefill opens the GGUF file named on the command line,
// prefills ten token ids and prints the five most likely next tokens (the
// same program as in the other bindings' READMEs).
//
//	go run ./examples/gguf_prefill tiny.gguf   # e.g. from `qsp synth --preset tiny tiny.gguf`
package main

import (
	"fmt"
	"log"
	"os"
	"sort"

	"qsp"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: gguf_prefill MODEL.gguf")
	}
	tokens := []int32{1, 7, 42, 100, 255, 0, 128, 64, 3, 200}
	ctx, err := qsp.NewContextFromGGUF(os.Args[1], qsp.ExecOptions{Backend: qsp.BackendCPU, NThreads: 2}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	if err := ctx.Prefill(tokens); err != nil {
		log.Fatal(err)
	}
	logits, err := ctx.Logits()
	if err != nil {
		log.Fatal(err)
	}
	top := make([]int, len(logits))
	for i := range top {
		top[i] = i
	}
	sort.SliceStable(top, func(a, b int) bool { return logits[top[a]] > logits[top[b]] })
	fmt.Printf("top 5 of %d logits after %d tokens:\n", len(logits), len(tokens))
	for _, t := range top[:5] {
		fmt.Printf("%d %.4f\n", t, logits[t])
	}
}
