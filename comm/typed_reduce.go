package comm

import (
	"fmt"
	"unsafe"
)

// ReduceInto folds in into acc element-wise (acc[i] = acc[i] op in[i]),
// both the bytes of elements of type d, of the same length. The in-process
// backends and the conformance suite's reference reduce with it, so every
// backend that reduces in Go computes the same thing (MPI reduces in C).
func ReduceInto(d Datatype, op ReduceOp, acc, in []byte) {
	switch d {
	case dtByte:
		reduceInts(op, acc, in)
	case dtInt32:
		reduceInts(op, view[int32](acc), view[int32](in))
	case dtInt64:
		reduceInts(op, view[int64](acc), view[int64](in))
	case dtUint64:
		reduceInts(op, view[uint64](acc), view[uint64](in))
	case dtFloat32:
		reduceFloats(op, view[float32](acc), view[float32](in))
	case dtFloat64:
		reduceFloats(op, view[float64](acc), view[float64](in))
	default:
		panic(fmt.Sprintf("comm: ReduceInto: unknown datatype %d", uint8(d)))
	}
}

// view is b's elements as []T (no copy; b's length a multiple of T's size).
func view[T Element](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

type integer interface {
	~byte | ~int32 | ~int64 | ~uint64
}

type float interface{ ~float32 | ~float64 }

func reduceInts[T integer](op ReduceOp, a, b []T) {
	switch op {
	case Sum:
		for i := range a {
			a[i] += b[i]
		}
	case Prod:
		for i := range a {
			a[i] *= b[i]
		}
	case Min:
		for i := range a {
			a[i] = min(a[i], b[i])
		}
	case Max:
		for i := range a {
			a[i] = max(a[i], b[i])
		}
	case BitOr:
		for i := range a {
			a[i] |= b[i]
		}
	case BitAnd:
		for i := range a {
			a[i] &= b[i]
		}
	case BitXor:
		for i := range a {
			a[i] ^= b[i]
		}
	default:
		panic(fmt.Sprintf("comm: reduction %s of integers", op))
	}
}

func reduceFloats[T float](op ReduceOp, a, b []T) {
	switch op {
	case Sum:
		for i := range a {
			a[i] += b[i]
		}
	case Prod:
		for i := range a {
			a[i] *= b[i]
		}
	case Min:
		for i := range a {
			a[i] = min(a[i], b[i])
		}
	case Max:
		for i := range a {
			a[i] = max(a[i], b[i])
		}
	default:
		panic(fmt.Sprintf("comm: reduction %s of floating-point numbers", op))
	}
}
