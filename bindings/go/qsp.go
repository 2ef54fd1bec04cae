// Package qsp drives libqsp, a prompt-prefill engine for quantized
// decoder-only transformers, through its C API (include/qsp/qsp.h) with cgo.
//
// The library is found with pkg-config ("qsp"). A Context owns a qsp_context:
// call Close when done; a finalizer frees forgotten contexts as a safety net.
// A Context serializes its own calls with a mutex, so it may be shared between
// goroutines (different contexts run concurrently). Every failing call returns
// an *Error carrying the library's Status and message.
//
// PrefillBatch advances several contexts of one model in one call
// (qsp_prefill_batch); it makes the package need libqsp >= 1.1.
//
// The loaded library's ABI version is checked when the package initializes:
// if it is not ABIVersion, CheckABI, NewContext and GetCacheStats return an
// *Error (StatusUnsupported) that says so.
package qsp

/*
#cgo pkg-config: qsp
#include <stdlib.h>
#include <qsp/qsp.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// ABIVersion is the ABI major version this package was written for (QSP_ABI_VERSION).
const ABIVersion = 1

// Status is a qsp_status value.
type Status int32

// The library's status codes (QSP_OK, QSP_ERR_*).
const (
	StatusOK                Status = 0
	StatusInvalidArgument   Status = -1
	StatusStructSize        Status = -2
	StatusShape             Status = -3
	StatusDType             Status = -4
	StatusOutOfRange        Status = -5
	StatusNotReady          Status = -6
	StatusContextFull       Status = -7
	StatusHandleConflict    Status = -8
	StatusNoDevice          Status = -9
	StatusOutOfMemory       Status = -10
	StatusDeviceOutOfMemory Status = -11
	StatusDevice            Status = -12
	StatusUnsupported       Status = -13
	StatusInternal          Status = -14
	StatusIO                Status = -15
	StatusBadFormat         Status = -16
	StatusBufferTooSmall    Status = -17 // 1.2
)

// String is the library's description ("out of range"), from this package's
// copy: formatting an error never calls into the library (which may be of
// another ABI). The tests check the copy against StatusString.
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusInvalidArgument:
		return "invalid argument"
	case StatusStructSize:
		return "wrong struct_size"
	case StatusShape:
		return "shape mismatch"
	case StatusDType:
		return "wrong dtype or byte size"
	case StatusOutOfRange:
		return "out of range"
	case StatusNotReady:
		return "not ready"
	case StatusContextFull:
		return "context full"
	case StatusHandleConflict:
		return "handle conflict"
	case StatusNoDevice:
		return "no CUDA device"
	case StatusOutOfMemory:
		return "out of host memory"
	case StatusDeviceOutOfMemory:
		return "out of device memory"
	case StatusDevice:
		return "device error"
	case StatusUnsupported:
		return "unsupported"
	case StatusInternal:
		return "internal error"
	case StatusIO:
		return "I/O error"
	case StatusBadFormat:
		return "bad file format"
	case StatusBufferTooSmall:
		return "buffer too small"
	}
	return "unknown status"
}

// StatusString is the loaded library's description of a status code
// (qsp_status_string).
func StatusString(code int32) string { return C.GoString(C.qsp_status_string(C.qsp_status(code))) }

// Error is a failed qsp call.
type Error struct {
	Status  Status
	Message string // the library's message
}

func (e *Error) Error() string {
	return fmt.Sprintf("qsp: %s (%d): %s", e.Status, int32(e.Status), e.Message)
}

// StatusOf returns the Status of a qsp *Error (StatusOK for nil, StatusInternal
// for an error that is not a qsp error).
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	if e, ok := err.(*Error); ok {
		return e.Status
	}
	return StatusInternal
}

// DType is a tensor element type (GGML type ids).
type DType int32

// Element types.
const (
	F32  DType = C.QSP_DTYPE_F32
	F16  DType = C.QSP_DTYPE_F16
	Q4_0 DType = C.QSP_DTYPE_Q4_0
	Q8_0 DType = C.QSP_DTYPE_Q8_0
	BF16 DType = C.QSP_DTYPE_BF16
	Q4_1 DType = C.QSP_DTYPE_Q4_1
	Q5_0 DType = C.QSP_DTYPE_Q5_0
	Q5_1 DType = C.QSP_DTYPE_Q5_1
	Q2_K DType = C.QSP_DTYPE_Q2_K
	Q3_K DType = C.QSP_DTYPE_Q3_K
	Q4_K DType = C.QSP_DTYPE_Q4_K
	Q5_K DType = C.QSP_DTYPE_Q5_K
	Q6_K DType = C.QSP_DTYPE_Q6_K
)

// Size is the byte size of an nRows x nCols tensor (0 if impossible).
func (d DType) Size(nRows, nCols uint64) uint64 {
	return uint64(C.qsp_dtype_size(C.int32_t(d), C.uint64_t(nRows), C.uint64_t(nCols)))
}

func (d DType) String() string { return C.GoString(C.qsp_dtype_name(C.int32_t(d))) }

// Backend selects where a context runs.
type Backend int32

// Backends.
const (
	BackendAuto Backend = C.QSP_BACKEND_AUTO
	BackendCPU  Backend = C.QSP_BACKEND_CPU
	BackendCUDA Backend = C.QSP_BACKEND_CUDA
)

// Available reports whether the backend is usable in this process.
func (b Backend) Available() bool { return C.qsp_backend_available(C.int32_t(b)) != 0 }

// RoPE styles.
const (
	RopeNeox        = C.QSP_ROPE_NEOX
	RopeInterleaved = C.QSP_ROPE_INTERLEAVED
)

var abiErr = checkABI()

func checkABI() error {
	abi := uint32(C.qsp_abi_version())
	if abi != ABIVersion {
		return &Error{StatusUnsupported, fmt.Sprintf(
			"ABI mismatch: the loaded libqsp has ABI version %d, but this Go package was written for ABI version %d; "+
				"use libqsp.so.%d or a qsp Go package for ABI %d", abi, ABIVersion, ABIVersion, abi)}
	}
	return nil
}

// CheckABI returns nil when the loaded library speaks ABIVersion.
func CheckABI() error { return abiErr }

// Version is the loaded library's version, e.g. "1.0.0".
func Version() string { return C.GoString(C.qsp_version_string()) }

// LibraryABIVersion is the loaded library's ABI major version.
func LibraryABIVersion() uint32 { return uint32(C.qsp_abi_version()) }

func takeMessage(st C.qsp_status, msg *C.char) error {
	if st == C.QSP_OK {
		return nil
	}
	m := ""
	if msg != nil {
		m = C.GoString(msg)
		C.free(unsafe.Pointer(msg))
	}
	return &Error{Status(st), m}
}
