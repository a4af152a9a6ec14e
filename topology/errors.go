package topology

import "errors"

var (
	// ErrInvalidLayout is wrapped by every error about a malformed or
	// out-of-range layout spec or Layout value.
	ErrInvalidLayout = errors.New("topology: invalid layout")
	// ErrInvalidModel is wrapped by every error about a Model field.
	ErrInvalidModel = errors.New("topology: invalid model")
	// ErrIncompatible is wrapped when a layout cannot hold a model (layers or
	// heads do not divide) or when a CTX and a GEN layout cannot be mapped.
	ErrIncompatible = errors.New("topology: incompatible layout")
)
