package main

import "io"

func scenarioCmd(args []string, stdout, stderr io.Writer) error {
	return usagef("scenario: not built yet")
}
