package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// watchOf watches key of q as read now, failing t on error.
func watchOf(t *testing.T, q *Queue, key string) (<-chan struct{}, func()) {
	t.Helper()
	ctx := context.Background()
	v, err := q.Get(ctx, []byte(key))
	if err != nil && !errors.Is(err, ErrKeyNotFound) {
		t.Fatal(err)
	}
	ch, cancel, err := q.watchKey(ctx, []byte(key), v, err == nil)
	if err != nil {
		t.Fatalf("watchKey(%s): %v", key, err)
	}
	t.Cleanup(cancel)
	return ch, cancel
}

func quiet(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: the watch fired", what)
	default:
	}
}

func fires(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the watch did not fire", what)
	}
}

// A watch fires at the commit that writes its key (put, delete,
// compare-and-put), at once when the key changed since it was read, and
// not for other keys; cancelled watches leave nothing behind.
func TestWatchKeyLocal(t *testing.T) {
	ctx := context.Background()
	q, err := Open(ctx, "mem://watch-local")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	l := q.be.(*local)
	if err := q.Put(ctx, []byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	ch, cancel := watchOf(t, q, "k")
	absent, _ := watchOf(t, q, "nokey")
	quiet(t, ch, "registered")
	quiet(t, absent, "registered on an absent key")
	if err := q.Put(ctx, []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	quiet(t, ch, "another key written")
	if err := q.CompareAndPut(ctx, []byte("k"), []byte("v1"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	fires(t, ch, "compare-and-put")
	cancel()
	// Read v1, watch after v2 was written: fires at once.
	stale, _, err := q.watchKey(ctx, []byte("k"), []byte("v1"), true)
	if err != nil {
		t.Fatal(err)
	}
	fires(t, stale, "stale read")
	if err := q.Put(ctx, []byte("nokey"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	fires(t, absent, "absent key created")
	ch, cancel = watchOf(t, q, "k")
	if err := q.Delete(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	fires(t, ch, "delete")
	cancel()
	ch, cancel = watchOf(t, q, "k")
	cancel()
	if n := l.watches.n.Load(); n != 0 {
		t.Fatalf("%d keys watched after every watch fired or was cancelled", n)
	}
	select {
	case <-ch:
		t.Fatal("a cancelled watch fired")
	default:
	}
}

// A read-only Queue refuses watches: it learns of no commit.
func TestWatchKeyReadOnly(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	q, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	r, err := Open(ctx, url, WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, _, err := r.watchKey(ctx, []byte("k"), nil, false); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("watchKey on a read-only Queue = %v; want ErrReadOnly", err)
	}
}

// A member's watches ride its long-poll to the writer: they fire at the
// writer's commits and the member's own, and at once for a stale read;
// after the writer dies, they fire, and watch again at the next writer.
func TestWatchKeyMember(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	const hb = 400 * time.Millisecond
	w := openMember(t, url, WithHeartbeat(hb))
	m := openMember(t, url, WithHeartbeat(hb))
	m2 := openMember(t, url, WithHeartbeat(hb))
	if w.Role() != RoleWriter || m.Role() != RoleMember || m2.Role() != RoleMember {
		t.Fatalf("roles %v %v %v", w.Role(), m.Role(), m2.Role())
	}
	if err := m.Put(ctx, []byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	ch, cancel := watchOf(t, m, "k")
	quiet(t, ch, "registered")
	if err := w.Put(ctx, []byte("k"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	fires(t, ch, "the writer's put")
	cancel()
	ch, cancel = watchOf(t, m, "k")
	if err := m.Put(ctx, []byte("k"), []byte("v3")); err != nil {
		t.Fatal(err)
	}
	fires(t, ch, "the member's own put")
	cancel()
	stale, cancel, err := m.watchKey(ctx, []byte("k"), []byte("v1"), true)
	if err != nil {
		t.Fatal(err)
	}
	fires(t, stale, "stale read")
	cancel()

	// Across the writer's death.
	ch, _ = watchOf(t, m, "k")
	ch2, _ := watchOf(t, m2, "k")
	killWriter(t, w)
	fires(t, ch, "change of writer")
	fires(t, ch2, "change of writer")
	testenv.Eventually(t, 30*hb, "a new writer", func() bool { return m.Role() == RoleWriter || m2.Role() == RoleWriter })
	writer, member := m, m2
	if m2.Role() == RoleWriter {
		writer, member = m2, m
	}
	testenv.Eventually(t, 30*hb, "a member of the new writer", func() bool { return member.Role() == RoleMember && member.Health().Healthy })
	ch, _ = watchOf(t, member, "k")
	ownCh, _ := watchOf(t, writer, "k")
	if err := writer.Put(ctx, []byte("k"), []byte("v4")); err != nil {
		t.Fatal(err)
	}
	fires(t, ch, "the new writer's put, at a member")
	fires(t, ownCh, "the new writer's put, at the writer")
}
