package typed

import (
	"fmt"
	"unsafe"
)

// ReduceOp is the element-wise operation of a reduction (comm.ReduceOp:
// AllreduceInt64, and the typed Allreduce, Reduce and ReduceScatter, which
// add Prod and BitXor).
type ReduceOp uint8

// The reductions every backend supports.
const (
	Sum ReduceOp = iota + 1
	Min
	Max
	BitOr
	BitAnd
)

func (op ReduceOp) String() string {
	switch op {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	case BitOr:
		return "bor"
	case BitAnd:
		return "band"
	case Prod:
		return "prod"
	case BitXor:
		return "bxor"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(op))
}

// Valid reports whether op is one of the defined reductions.
func Valid(op ReduceOp) bool { return op >= Sum && op <= BitXor }

// Apply folds b into a element-wise (a[i] = a[i] op b[i]). Backends that
// reduce in Go use it so that every backend computes the same thing.
func Apply(op ReduceOp, a, b []int64) { reduceInts(op, a, b) }

// Reductions beyond ReduceOp's integer ones: a product for every type, and
// exclusive or for the integers.
const (
	Prod ReduceOp = BitAnd + 1 + iota
	BitXor
)

// ValidFor reports whether op reduces elements of type d: sum, prod, min and
// max reduce every type; the bitwise ops the integers (and bytes) only.
func (op ReduceOp) ValidFor(d Datatype) bool {
	switch op {
	case Sum, Prod, Min, Max:
		return true
	case BitOr, BitAnd, BitXor:
		return !d.Float()
	}
	return false
}

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
