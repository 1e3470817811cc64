// Package azblob enables azblob:// store URLs (Azure Blob Storage) in
// queue.Open, runtime.Open and the other functions that open a store by
// URL. Import it for its side effect:
//
//	import _ "github.com/stepwell/stepwell/queue/azblob"
//
// Without it, opening an azblob:// URL fails with an error wrapping
// queue.ErrInvalidURL that names this package; the Azure SDK is linked
// only into programs that import it.
//
// URLs have the form
//
//	azblob://CONTAINER?prefix=P/
//
// with these query parameters: prefix (a key prefix ending in '/'),
// storage_account, domain, protocol, cdn, localemu. Credentials come from
// the AZURE_STORAGE_* environment variables. The Azure SDK's own transport
// timeouts apply; the timeout parameters of s3:// and gs:// URLs are
// rejected.
package azblob

import _ "github.com/stepwell/stepwell/internal/objstore/azdrv" // registers azblob://
