// Package seedtab reproduces the tables of the bug reports rankrun grew
// from in virtual time: each seed's job as closely as the presets allow,
// run fixed and with the seed's replay, beside the figures the seed
// reports, and the cost of TensorRT-LLM #15139's blocking shape. rankrun
// bench prints them (Rows); cmd/rankrun's TestSeed000Table and
// TestBlocking15139Cost hold their shape.
//
// It runs each job through runspec, as the command line would; it does not
// print anything itself.
package seedtab
