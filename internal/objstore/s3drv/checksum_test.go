package s3drv_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestNoChecksumSkipWarnings: reading a multipart-uploaded object (its
// checksum is a checksum of part checksums, which the AWS SDK cannot
// validate) logs nothing. The SDK printed "Skipped validation of multipart
// checksum" to stderr on every read of one, about 1,000 lines for a large
// value read in ranges.
func TestNoChecksumSkipWarnings(t *testing.T) {
	url := testenv.S3(t)
	// The SDK's default logger writes to the os.Stderr of the time its
	// config is loaded: at Open.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logged := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		logged <- string(b)
	}()
	stderr := os.Stderr
	os.Stderr = w
	b, err := objstore.Open(t.Context(), url)
	os.Stderr = stderr
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	defer b.Close()

	data := bytes.Repeat([]byte("0123456789abcdef"), 12<<20/16)
	multipartUpload(t, url, "big", data, 5<<20)
	for range 3 {
		got, err := b.Get(t.Context(), "big")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get: %d bytes, %v", len(got), err)
		}
		rd, err := b.NewReader(t.Context(), "big")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read: %d bytes, %v", len(got), err)
		}
		rd.Close()
	}
	w.Close()
	if out := <-logged; strings.Contains(out, "checksum") {
		t.Errorf("reading a multipart object logged:\n%.2000s", out)
	}
}

// multipartUpload stores data at key of the store at url in parts of
// partSize, with CRC32 checksums, as "aws s3 cp" does for a large file:
// the object's checksum is then COMPOSITE ("...-3").
func multipartUpload(t *testing.T, url, key string, data []byte, partSize int) {
	t.Helper()
	ctx := context.Background()
	c := s3.New(s3.Options{
		Region: testenv.S3Region, BaseEndpoint: aws.String(testenv.S3Endpoint(t)), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: testenv.S3AccessKey, SecretAccessKey: testenv.S3SecretKey}, nil
		}),
	})
	_, rest, _ := strings.Cut(url, "prefix=")
	prefix, _, _ := strings.Cut(rest, "&")
	bucket, k := aws.String(testenv.Bucket), aws.String(prefix+key)
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bucket, Key: k,
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumType: types.ChecksumTypeComposite})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for n, off := int32(1), 0; off < len(data); n, off = n+1, off+partSize {
		p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: bucket, Key: k, UploadId: up.UploadId, PartNumber: aws.Int32(n),
			Body: bytes.NewReader(data[off:min(off+partSize, len(data))]), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: p.ETag, ChecksumCRC32: p.ChecksumCRC32})
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bucket, Key: k, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bucket, Key: k, ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(aws.ToString(h.ChecksumCRC32), "-") {
		t.Fatalf("the object's checksum is %q (%s), not a multipart checksum", aws.ToString(h.ChecksumCRC32), h.ChecksumType)
	}
}
