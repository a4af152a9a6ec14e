package runfiles

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// CheckWritable creates path if need be and closes it: a file a run will
// write later (a dump) can be.
func CheckWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// ProbeWritable checks that path can be written, leaving no file behind
// that was not there before.
func ProbeWritable(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(path)
}

// CreateTemp creates a new file beside path to be renamed over it, with
// the mode os.Create gives (0666 less the umask; os.CreateTemp's 0600
// would make every output private).
func CreateTemp(path string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d", filepath.Base(path), rand.Uint64()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no free temporary name beside %s", path)
}

// WriteFile writes path through a temporary file in its directory and a
// rename, so a reader never sees half a file, even after an interrupt.
func WriteFile(flag, path string, write func(w io.Writer) error) error {
	tmp, err := CreateTemp(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	err = write(bw)
	err = errors.Join(err, bw.Flush(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return nil
}
