// Package azdrv is the azblob:// driver of package objstore: importing it
// registers an Opener for azblob URLs. Programs import it through the
// public package github.com/stepwell/stepwell/queue/azblob, which keeps the
// Azure SDK out of programs that do not.
package azdrv

import (
	"context"
	"net/url"

	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/stepwell/stepwell/internal/objstore"
)

func init() { objstore.Register("azblob", open) }

// open opens an azblob:// container through gocloud's default azureblob
// URL opener (credentials from the AZURE_STORAGE_* environment variables),
// with the Azure SDK's own transport and timeouts: objstore rejects the
// timeout parameters for azblob URLs.
func open(ctx context.Context, p objstore.OpenParams) (*blob.Bucket, error) {
	u := &url.URL{Scheme: azureblob.Scheme, Host: p.Bucket, RawQuery: p.Query.Encode()}
	return blob.DefaultURLMux().OpenBucketURL(ctx, u)
}
