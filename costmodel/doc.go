// Package costmodel is the layout-aware compute cost model of a run: how
// long a CTX rank group takes to prefill a batch and a GEN rank group to run
// one decode step, for a model description (Model) on a hardware profile
// (Hardware) under a parallel layout (topology.Layout).
//
// It owns:
//
//   - Model and Hardware, their presets (each figure with its public source
//     in a comment beside it) and their JSON files (LoadModel, LoadHardware),
//     validated field by field.
//   - Pure functions of time: Prefill (FLOPs of the batch's tokens, dense
//     and attention terms, MoE active parameters, divided over TP and CP
//     ranks at Hardware's achieved fraction of peak; PP stages pipelining
//     micro-batches; the TP/CP collectives of every layer and the PP
//     activation sends through the sim backend's link model) and Decode
//     (two kernels one after the other, each a roofline: the GEMMs, the
//     larger of their compute time and the weights a rank reads, then
//     attention, the larger of its QK^T and AV and the KV of its batch,
//     each memory time at its achieved fraction of HBM bandwidth).
//   - Offline: an aggregated instance's offline steady state under a
//     Scheduler (max batch, token budget, chunked prefill, overlap),
//     batching in flight.
//   - Benchmark: a finite run of identical requests queued at once, step
//     by step, waves, ramp and tail; TRTLLMBench, the scheduler trtllm-bench
//     picks for one: together the throughput TensorRT-LLM's published
//     tables measure.
//   - Placement: one run's CTX and GEN layouts on one world (CTX ranks first),
//     the object the executor's compute hook calls.
//
// It knows nothing of the executor, requests or time sources: every
// function is pure, and the same arguments give the same duration.
//
// The KV-cache geometry of a run (layers, KV heads, head dim, bytes per
// element) is Model.Geometry, so the bytes the runtime moves and the bytes
// the model reads agree. What the model leaves out is listed in
// docs/costmodel.md ("What it leaves out"): kernel launch and framework overheads (it under-predicts
// short prompts), sliding-window attention, contention between collectives,
// and prefill/decode overlap inside one rank.
package costmodel
