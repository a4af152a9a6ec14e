//go:build !amd64

package main

// hasAVX2 is false: wordseq's AVX2 loops exist only on amd64.
func hasAVX2() bool { return false }
