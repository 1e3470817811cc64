package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use: a child process's
// output or a logger writes into it while the test reads it. If OnLine is
// set, it is called (under the buffer's lock) with every complete line
// written, without its newline.
type Buffer struct {
	OnLine func(line string)

	mu   sync.Mutex
	buf  bytes.Buffer
	part []byte // the last line, until its newline comes
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.part = append(b.part, p...)
	for {
		i := bytes.IndexByte(b.part, '\n')
		if i < 0 {
			break
		}
		if b.OnLine != nil {
			b.OnLine(string(b.part[:i]))
		}
		b.part = b.part[i+1:]
	}
	return len(p), nil
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
