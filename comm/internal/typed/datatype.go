package typed

import (
	"fmt"
	"unsafe"
)

// Datatype is the element type of a typed collective.
type Datatype uint8

// The datatypes.
const (
	dtByte Datatype = iota + 1
	dtInt32
	dtInt64
	dtUint64
	dtFloat32
	dtFloat64
)

func (d Datatype) String() string {
	switch d {
	case dtByte:
		return "byte"
	case dtInt32:
		return "int32"
	case dtInt64:
		return "int64"
	case dtUint64:
		return "uint64"
	case dtFloat32:
		return "float32"
	case dtFloat64:
		return "float64"
	}
	return fmt.Sprintf("Datatype(%d)", uint8(d))
}

// Size is the size of one element in bytes (0 for an unknown type).
func (d Datatype) Size() int {
	switch d {
	case dtByte:
		return 1
	case dtInt32, dtFloat32:
		return 4
	case dtInt64, dtUint64, dtFloat64:
		return 8
	}
	return 0
}

// Valid reports whether d is a defined datatype.
func (d Datatype) Valid() bool { return d >= dtByte && d <= dtFloat64 }

// Float reports whether d is a floating-point type (no bitwise reductions).
func (d Datatype) Float() bool { return d == dtFloat32 || d == dtFloat64 }

// Element is a type the typed collectives carry.
type Element interface {
	~byte | ~int32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// DatatypeOf is the Datatype of T.
func DatatypeOf[T Element]() Datatype {
	var z T
	switch any(z).(type) {
	case byte:
		return dtByte
	case int32:
		return dtInt32
	case int64:
		return dtInt64
	case uint64:
		return dtUint64
	case float32:
		return dtFloat32
	case float64:
		return dtFloat64
	}
	// A named type (~T): tell them apart by size and by whether -1
	// converts to a negative value or a fraction survives.
	switch unsafe.Sizeof(z) {
	case 1:
		return dtByte
	case 4:
		if isFloat[T]() {
			return dtFloat32
		}
		return dtInt32
	default:
		switch {
		case isFloat[T]():
			return dtFloat64
		case isSigned[T]():
			return dtInt64
		}
		return dtUint64
	}
}

func isFloat[T Element]() bool {
	h := T(1)
	h /= 2 // 0 for integers
	return h != 0
}

func isSigned[T Element]() bool {
	var z T
	return z-1 < z
}
