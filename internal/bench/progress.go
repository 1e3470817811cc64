package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress rewrites one status line on w a few times a second.
type progress struct {
	w    io.Writer
	mu   sync.Mutex
	line func() string // guarded by mu
	done chan struct{}
	wg   sync.WaitGroup
	last int // length of the last line written (the writer goroutine's)
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, done: make(chan struct{})}
	if w == nil {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.write()
			case <-p.done:
				return
			}
		}
	}()
	return p
}

// set makes fn the source of the status line.
func (p *progress) set(fn func() string) {
	p.mu.Lock()
	p.line = fn
	p.mu.Unlock()
}

func (p *progress) write() {
	p.mu.Lock()
	fn := p.line
	p.mu.Unlock()
	if fn == nil {
		return
	}
	s := fn()
	pad := max(p.last-len(s), 0)
	fmt.Fprintf(p.w, "\r%s%s", s, strings.Repeat(" ", pad))
	p.last = len(s)
}

// stop writes the final state of the line and a newline.
func (p *progress) stop() {
	if p.w == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.wg.Wait()
	p.write()
	if p.last > 0 {
		fmt.Fprintln(p.w)
	}
}
