package runspec

import (
	"fmt"
	"strings"
)

// Error is a spec that cannot run: one line that starts with the flag it
// names ("--ctx-blocks 0: must be at least 1") and says the rule. A
// command line prints it as it is; a scenario file puts the line of the
// key named Field before it.
type Error struct {
	Field string // the flag without its dashes ("ctx-blocks"); "" where none is to blame
	err   error
}

func (e *Error) Error() string { return e.err.Error() }
func (e *Error) Unwrap() error { return e.err }

// Errorf is an Error whose field is the flag its message starts with
// ("--ctx-blocks %d: ..."): for a package that checks a spec further (a
// scenario made from one).
func Errorf(format string, args ...any) error { return errorf(format, args...) }

// errorf is Errorf.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Field: fieldOf(err.Error()), err: err}
}

// fieldOf is the flag a message starts with: "--ctx-blocks 0: ..." names
// ctx-blocks; "" when it starts with none.
func fieldOf(msg string) string {
	rest, ok := strings.CutPrefix(msg, "--")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, " :,="); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
