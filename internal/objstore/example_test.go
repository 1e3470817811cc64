package objstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepwell/stepwell/internal/objstore"
)

func Example() {
	ctx := context.Background()
	b, err := objstore.Open(ctx, "mem://example?prefix=queue/")
	if err != nil {
		panic(err)
	}
	defer b.Close()

	// Create-only writes are how a writer claims the next log position.
	fmt.Println(b.Put(ctx, "wal/00000000000000000001", []byte("batch 1"), true))
	err = b.Put(ctx, "wal/00000000000000000001", []byte("batch 1 again"), true)
	fmt.Println(errors.Is(err, objstore.ErrExists), objstore.IsRetryable(err))

	objs, _ := b.List(ctx, "wal/")
	fmt.Println(objs)
	// Output:
	// <nil>
	// true false
	// [{wal/00000000000000000001 7}]
}
