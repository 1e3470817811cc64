// Package objstore is the narrow object-store layer the storage engine is
// written against: get, put (optionally create-only), streaming read and
// write, delete and list, over a bucket named by a URL. It exists so that
// the engine depends on seven methods with exact semantics instead of on a
// cloud SDK, and so that local disk gets a driver that is really durable.
//
// # URLs
//
// Open and Canonical accept:
//
//	mem://NAME[?prefix=P/]
//	file:///ABSOLUTE/DIR        (also file://localhost/ABSOLUTE/DIR, file:/ABSOLUTE/DIR)
//	s3://BUCKET[?prefix=P/&region=R&endpoint=URL&use_path_style=true...]
//	gs://BUCKET[?prefix=P/...]
//	azblob://CONTAINER[?prefix=P/...]
//
// mem:// stores live in process memory (gocloud memblob) in a registry by
// NAME: every Open of a NAME sees the same objects, also after another
// handle was closed, until the process exits. NAME is required. They do
// not implement Locker.
//
// file:// stores are directories on a local file system, written by this
// package's own driver (below). The path must be absolute; file://rel/dir
// (which names host "rel"), file:rel and query parameters are rejected.
// Open creates nothing: the directory (with any missing parents) and its
// .tmp are created by the first write, segment or Lock, so that a store
// that is only read leaves no trace, and a missing directory reads as a
// store without objects. A path that is not a directory fails Open.
// Linux and macOS only.
//
// mem:// and file:// are built in. s3://, gs:// and azblob:// need a
// driver, registered with Register by the packages s3drv, gcsdrv and azdrv
// when a program imports them, through the public packages
// github.com/stepwell/stepwell/queue/s3, queue/gcs and queue/azblob (as
// gocloud.dev's own drivers are enabled by import), so that a program
// links only the cloud SDKs it uses. Open of a cloud URL without its
// driver fails with an error wrapping ErrInvalidURL that names the import;
// Canonical needs no driver. The URL checks below happen in this package,
// whatever drivers are linked.
//
// s3://, gs:// and azblob:// go through gocloud.dev/blob (v0.47) and
// accept its URL openers' query parameters; parameters outside these
// lists are rejected:
//
//   - all: prefix (a key prefix, which must end in '/'; keys passed to and
//     from the Bucket never include it).
//   - s3: region, endpoint, use_path_style (or s3ForcePathStyle),
//     disable_https, profile, anonymous, role, hostname_immutable,
//     dualstack, fips, accelerate, rate_limiter_capacity, ssetype,
//     kmskeyid, request_checksum_calculation,
//     response_checksum_validation, awssdk. Credentials come from the
//     usual AWS environment and files. A region is required: from the
//     URL, AWS_REGION or AWS_DEFAULT_REGION, or the AWS config profile;
//     without one Open fails (ErrInvalidURL). For MinIO and other S3-compatible
//     servers: s3://BUCKET?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true.
//   - gs: anonymous, access_id, private_key_path, universe_domain, grpc,
//     zonal. Credentials are Application Default Credentials; with
//     STORAGE_EMULATOR_HOST set, the emulator is used without credentials.
//   - azblob: storage_account, domain, protocol, cdn, localemu.
//     Credentials come from the AZURE_STORAGE_* environment variables.
//   - s3 and gs: connect_timeout (default 10s: TCP and TLS handshakes),
//     response_timeout (30s: from the end of the request to the response
//     headers) and idle_timeout (90s: pooled connections), Go durations.
//     They apply to this package's HTTP clients (gs with grpc=true or
//     zonal=true uses gRPC, which they do not reach); azblob keeps the
//     Azure SDK's defaults and rejects them.
//
// A path in a cloud URL (s3://bucket/dir) is rejected rather than ignored:
// use prefix=dir/. Any URL problem is an error wrapping ErrInvalidURL.
//
// # Keys
//
// Keys are slash-separated relative names of at most 900 bytes of valid
// UTF-8, without control characters or backslashes, whose segments are
// non-empty, at most 255 bytes, and neither "." nor "..". Keys starting
// with '.' are reserved for drivers (the file driver keeps its lock and
// temporary files there). Any operation on a key breaking these rules fails
// with ErrInvalidKey, on every driver, so that code tested on mem:// works
// on file://. List takes any prefix.
//
// # Guarantees
//
// On every driver:
//
//   - Put and Writer.Close make an object appear atomically: readers and
//     List see the old state or the whole new object.
//   - A create-only write (ifNotExist) is atomic against every other
//     writer, in this process and in others: of several racing create-only
//     writes of one key exactly one succeeds, the rest get ErrExists and
//     change nothing. This is what the engine's fencing rests on.
//   - A successful Put or Writer.Close is durable: it survives a crash of
//     the process or the machine (mem:// stores survive neither). A Delete
//     survives a process crash; after a power loss the file driver may
//     bring a deleted object back (its directory is not fsynced), so delete
//     only what is garbage either way.
//   - Reads and List after a successful write see it (S3, GCS and Azure
//     are strongly consistent for this).
//
// # Ambiguous writes
//
// When Put or Writer.Close fails with a retryable error (IsRetryable), the
// object may or may not have been written: the request may have reached the
// service and only its answer been lost. The same holds for context
// cancellation during a write. Cloud SDKs also retry internally, so a
// create-only write can fail with ErrExists because its own earlier attempt
// succeeded. A caller that must know reads the object back and compares it
// with what it sent.
//
// # The file driver
//
// gocloud's fileblob neither fsyncs nor makes create-only writes atomic
// across processes, so file:// stores use this package's driver. The store
// directory holds:
//
//	<dir>/.lock      flock(2) target of Lock; holds the pid of the last holder
//	<dir>/.tmp/      staging files of writes in progress (named ones are listed);
//	                 created by the first write
//	<dir>/KEY        one regular file per object ("wal/0001" -> <dir>/wal/0001)
//
// A write stages the object's bytes in a file nobody can see, makes the
// data durable, then publishes it under the key's name, then makes the name
// durable:
//
//   - Create-only writes (ifNotExist) on Linux stage an unnamed file:
//     open(.tmp, O_TMPFILE), write, fdatasync. Publishing is
//     linkat("/proc/self/fd/N", dirfd, name, AT_SYMLINK_FOLLOW), which
//     fails with EEXIST if the name exists (ErrExists), atomically across
//     processes, like link(2). Until then the file has no name at all, and
//     after a crash the kernel frees it: a crash leaves nothing behind.
//     The next write's unnamed file is opened in the background while this
//     one syncs (creating an inode waits for the journal the syncs keep
//     busy); Close closes it.
//   - Other writes, and create-only writes on macOS or on file systems
//     without O_TMPFILE (the first write that gets EOPNOTSUPP, EISDIR or
//     EINVAL switches the store over), stage a named file in .tmp: create,
//     write, fdatasync (F_FULLFSYNC on macOS). A create-only write publishes
//     it with link(2) (EEXIST as above) and then unlinks the temporary
//     name; any other write with rename(2), which atomically replaces.
//
// In both, publishing names the file relative to an open descriptor of the
// object's directory, and fsyncing that descriptor makes the new name
// durable: the name reaches the disk only after the data it names, so a
// crash never leaves a partial object visible. fdatasync suffices for the
// data: it covers the size and block map needed to read the file back, and
// the link count and the name are the directory fsync's. Directories for
// key prefixes ("wal/") are created on demand and fsynced into their
// parents. The store keeps up to 32 directories open between writes and
// closes them on Close; a cached directory that was removed behind its
// back is reopened by path. Delete is unlink(2), without a directory fsync
// (see above). Directories are never removed.
//
// The file driver also implements Segmenter: NewSegment stages a file as a
// create-only write does, fills it with zeros by write(2) (not fallocate:
// an fallocated block stays "unwritten" until its first write, which the
// file system's journal must then commit, so overwriting it costs as much
// as a new file) and fdatasyncs it; Publish links it like a create-only
// write and fsyncs the directory; Segment.Sync is one fdatasync of the
// overwritten blocks, which needs no metadata made durable. SyncPrefix
// fdatasyncs every file under a prefix and fsyncs their directories.
//
// Lock takes flock(LOCK_EX|LOCK_NB) on .lock. The lock belongs to the open
// file, so it excludes other processes and other Buckets of this process
// alike (ErrLocked); Close releases it, and so does process death. A
// child process holds copies of its parent's descriptors from its fork
// until its exec, so a lock file just closed may stay locked for as long:
// a Lock that finds the lock held, last by this very process, and by none
// of its Buckets, waits for that (up to 5s) instead of failing. Having
// taken the lock, Lock deletes everything in .tmp: named staging files of
// writers that crashed (unnamed ones are gone with their process).
//
// A full disk and a read-only file system: writes fail with an error
// wrapping syscall.ENOSPC (or EDQUOT, over a quota) or syscall.EROFS
// (errors.Is finds them through the OpError and the *fs.PathError of the
// failed system call). A write that fails so leaves nothing behind: its
// staged file is discarded before anything is published. IsRetryable
// reports true for ENOSPC and EDQUOT, so that a writer that retries
// transient errors with backoff heals once space is freed, and false for
// EROFS: a file system goes read-only when mounted so or when the kernel
// stops writing to it after an I/O error, and only an operator makes it
// writable again. Reads, List and Delete work on a full disk (Delete
// frees space), and so do segments already staged: their blocks are
// allocated. No failed sync is retryable, whatever its errno: failures of
// Segment.WriteAt, Segment.Sync and SyncPrefix, and of the directory sync
// that makes a new name durable (Put, Writer.Close, Publish, new
// directories), are marked not retryable, because after a failed fsync
// the kernel may drop the pages it could not write and mark them clean,
// and a repeated request would not sync them again (an object's retry
// finds its name and reports ErrExists; a second fsync reports success).
// objstoretest.Fault injects these errors as the driver reports them
// (SetDiskFull, SetReadOnly).
//
// Caveats: a key and a key prefix ending at a '/' cannot coexist ("a" and
// "a/b": "a" would have to be a file and a directory); the second write
// fails with ErrInvalidKey. flock is unreliable on network file systems
// (NFS, SMB); use a local file system. Files are created with mode 0600
// and directories 0700. Only the lock holder should write: a Lock in
// another process deletes the named staging files of writes in progress,
// which then fail (without writing anything).
//
// # Cloud caveats
//
// gocloud's GCS driver reports HTTP 403 as NotFound (GCS answers 403 for
// objects in buckets the caller cannot list), so a permission problem on
// GCS surfaces as ErrNotFound. S3 answers 409 ConditionalRequestConflict
// to create-only writes racing on one key; that is retryable, and a retry
// gets ErrExists or succeeds. A large streamed write may be a multipart
// upload; it is still atomic and still create-only.
//
// # Wrappers
//
// Counting counts requests by kind (for cost accounting and request-count
// tests). Package objstoretest has a fault-injecting wrapper and the
// conformance suite every driver passes. Wrappers expose the bucket they
// wrap with an Unwrap() Bucket method; AsLocker and AsSegmenter look
// through them, and both wrappers see segment requests (SegmentWrapper).
package objstore
