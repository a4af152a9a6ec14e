package consensus

import (
	"fmt"
	"reflect"
	"testing"
)

// testify is listed in go.mod but its dependencies (go.yaml.in/yaml/v3,
// go-spew, go-difflib) are missing from go.sum, so these tests use the
// standard library and these two helpers.

// mustEqual stops the test when got differs from want.
func mustEqual(t *testing.T, want, got any, format string, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%s\nwant %+v\ngot  %+v", fmt.Sprintf(format, args...), want, got)
	}
}

// checkEqual records a failure when got differs from want and goes on.
func checkEqual(t *testing.T, want, got any, format string, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s\nwant %+v\ngot  %+v", fmt.Sprintf(format, args...), want, got)
	}
}

func mustNoError(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
