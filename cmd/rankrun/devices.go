package main

import "io"

func devicesCmd(args []string, stdout, stderr io.Writer) error {
	return usagef("devices: not built yet")
}
