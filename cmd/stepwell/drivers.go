package main

// The CLI opens any store, so it links every cloud driver (programs that
// embed stepwell choose theirs: see the README's "Stores" table).
import (
	_ "github.com/stepwell/stepwell/queue/azblob"
	_ "github.com/stepwell/stepwell/queue/gcs"
	_ "github.com/stepwell/stepwell/queue/s3"
)
