//go:build amd64

package main

import "golang.org/x/sys/cpu"

// hasAVX2 reports whether the suite runs wordseq's AVX2 loops here.
func hasAVX2() bool { return cpu.X86.HasAVX2 }
