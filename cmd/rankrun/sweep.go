package main

import "io"

func sweepCmd(args []string, stdout, stderr io.Writer) error { return usagef("sweep: not built yet") }
