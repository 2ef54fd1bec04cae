package qsp

// The progress trampoline's Go side. A file with //export may only declare
// C functions in its preamble, so it lives apart from gguf.go.

/*
#include <stdint.h>
*/
import "C"

import "runtime/cgo"

//export goqspProgress
func goqspProgress(done, total C.uint64_t, h C.uintptr_t) {
	s := cgo.Handle(h).Value().(*progressState)
	if s.panicked {
		return
	}
	// A panic must not unwind through the C frames of qsp_gguf_upload:
	// recover it here; NewContext raises it again once the upload returns.
	defer func() {
		if r := recover(); r != nil {
			s.panicked, s.value = true, r
		}
	}()
	s.fn(uint64(done), uint64(total))
}
