// Package testenv starts real cloud-protocol object-store servers on
// 127.0.0.1 for the project's own tests, so that every backend suite can run
// against S3 and GCS wire protocols without an account, a network or Docker.
//
// # Servers
//
//   - S3: MinIO (github.com/minio/minio), single node, single drive, on a temp
//     directory. MinIO honours If-None-Match: * atomically under concurrency,
//     which is what create-only WAL writes rely on.
//   - GCS: fake-gcs-server (github.com/fsouza/fake-gcs-server), which honours
//     ifGenerationMatch=0.
//
// Each server is started lazily, at most once per test process, the first
// time a test asks for a URL; it listens on a free 127.0.0.1 port and keeps
// its data in a fresh temporary directory. Every call hands out a new key
// prefix in one shared bucket, so tests never see each other's objects.
//
// A package that uses S3 or GCS must stop the servers when its tests end:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// If the test binary dies anyway (a panic, a timeout, SIGKILL), on Linux the
// servers are killed with it (PR_SET_PDEATHSIG); an interrupt (SIGINT,
// SIGTERM) stops them and exits.
//
// # Finding the binaries
//
// The servers are executables, looked up in this order:
//
//  1. the directory $STEPWELL_TOOLS_BIN, if set;
//  2. <repo>/.ci/bin, where `bash .ci/install-tools` installs them (pinned);
//  3. $PATH.
//
// When a binary is missing the test is skipped with instructions, unless the
// environment has CI=true, in which case it fails: CI must never pass by
// silently skipping the integration suites.
//
// # Process environment
//
// The URLs alone are not enough; the harness also sets, process-wide and
// before returning the first URL of each kind:
//
//   - for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the MinIO root
//     credentials), AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE pointing
//     at empty files, AWS_EC2_METADATA_DISABLED=true; and it unsets
//     AWS_SESSION_TOKEN, AWS_PROFILE, AWS_DEFAULT_PROFILE, AWS_ENDPOINT_URL
//     and AWS_ENDPOINT_URL_S3, so that nothing in the developer's ~/.aws or
//     shell can redirect or re-sign the requests;
//   - for GCS: STORAGE_EMULATOR_HOST=127.0.0.1:PORT. gocloud's gcsblob has no
//     URL parameter for the endpoint: with this variable set it talks plain
//     HTTP to the emulator without credentials, for every gs:// URL of the
//     process (it must be set before the first gs:// bucket is opened).
//
// Child processes started by tests (crash tests) inherit these variables.
//
// # Waiting and fixtures
//
// Eventually is the one way a test waits for a condition: it polls until
// the condition holds and fails the test, saying what it waited for, after a
// timeout multiplied by Scale's factor ($STEPWELL_TEST_TIMEOUT_SCALE, or 2
// when CI=true). A test that checks something does NOT happen first waits,
// with Eventually or a signal, for evidence that the path that would do it
// has run; it never sleeps and then asserts. MemURL names a fresh mem://
// store.
package testenv
