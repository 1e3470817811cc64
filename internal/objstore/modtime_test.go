package objstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/testenv"
)

// TestModTime: the file and cloud drivers tell when an object was written.
func TestModTime(t *testing.T) {
	for name, url := range map[string]func() string{
		"file": func() string { return "file://" + t.TempDir() },
		"s3":   func() string { return testenv.S3(t) },
	} {
		t.Run(name, func(t *testing.T) {
			b, err := objstore.Open(t.Context(), url())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			mt, ok := b.(objstore.ModTimer)
			if !ok {
				t.Fatalf("%T is not a ModTimer", b)
			}
			if _, err := mt.ModTime(t.Context(), "k"); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("ModTime of a missing object: %v, want ErrNotFound", err)
			}
			if err := b.Put(t.Context(), "k", []byte("v"), false); err != nil {
				t.Fatal(err)
			}
			at, err := mt.ModTime(t.Context(), "k")
			if d := time.Since(at); err != nil || d < -time.Minute || d > time.Minute {
				t.Errorf("ModTime = %v, %v: want about now", at, err)
			}
		})
	}
}
