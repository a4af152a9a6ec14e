package transceiver

// CopyCheckRun is copyCheckRun, for the external benchmarks.
var CopyCheckRun = copyCheckRun
