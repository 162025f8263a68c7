package retry

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// readAll reads what io.ReadAll reads, whatever length the body declared:
// its own, shorter, longer, none, or zero; a read error is returned with
// the bytes before it.
func TestReadAllReadsWhatReadAllReads(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 100)
	for _, size := range []int64{-1, 0, 1, 511, 512, 999, 1000, 1001, 4096} {
		for _, r := range []func() io.Reader{
			func() io.Reader { return bytes.NewReader(body) },
			func() io.Reader { return iotest.OneByteReader(bytes.NewReader(body)) },
			func() io.Reader { return iotest.DataErrReader(bytes.NewReader(body)) },
		} {
			want, _ := io.ReadAll(r())
			got, err := readAll(r(), size)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("size %d: %d bytes, %v; want %d bytes", size, len(got), err, len(want))
			}
		}
		broken := errors.New("broken")
		got, err := readAll(io.MultiReader(bytes.NewReader(body[:10]), iotest.ErrReader(broken)), size)
		if !errors.Is(err, broken) || !bytes.Equal(got, body[:10]) {
			t.Errorf("size %d, a read error after 10 bytes: %q, %v", size, got, err)
		}
	}
}
