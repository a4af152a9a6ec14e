//go:build mpi

package mpi

// The cgo flags of the package; the C helpers live in cmpi.h, which every cgo
// file of the package includes (its functions are static, one copy per file).

// #cgo pkg-config: ompi
// #include "cmpi.h"
import "C"
