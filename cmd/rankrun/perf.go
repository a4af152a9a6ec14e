package main

import (
	_ "embed" // perfFileBuiltIn
)

// perfFileBuiltIn is perfsuite.File as this binary was built: rankrun
// bench run outside the repository compares with it.
//
//go:embed testdata/perf-figures.txt
var perfFileBuiltIn []byte
