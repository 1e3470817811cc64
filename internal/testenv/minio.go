package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// MinIO root credentials. They only guard a throwaway server on 127.0.0.1.
const (
	S3AccessKey = "stepwell"
	S3SecretKey = "stepwell-secret"
	// S3Region is the region given in S3 URLs; MinIO accepts any.
	S3Region = "us-east-1"
)

// S3 returns the URL of a fresh, empty store on a local MinIO server:
//
//	s3://stepwell-test?prefix=<unique>/&endpoint=http://127.0.0.1:PORT&region=us-east-1&use_path_style=true
//
// The server is started on first use; see the package documentation for the
// environment variables this sets. Without a minio binary the test is
// skipped (failed if CI=true).
func S3(t testing.TB) string {
	t.Helper()
	s, err := minio()
	need(t, "S3 (MinIO)", err)
	return fmt.Sprintf("s3://%s?prefix=%s&endpoint=http://%s&region=%s&use_path_style=true",
		Bucket, uniquePrefix(t), s.addr, S3Region)
}

// S3Endpoint returns the base URL of the local MinIO server
// (http://127.0.0.1:PORT), starting it if needed, for tests that talk to it
// with their own client.
func S3Endpoint(t testing.TB) string {
	t.Helper()
	s, err := minio()
	need(t, "S3 (MinIO)", err)
	return "http://" + s.addr
}

var minio = sync.OnceValues(startMinIO)

func startMinIO() (*server, error) {
	bin, err := findBinary("minio", "MinIO")
	if err != nil {
		return nil, err
	}
	return startMinIOAt(bin)
}

func startMinIOAt(bin string) (*server, error) {
	s, err := startServer(serverSpec{
		name: "MinIO",
		bin:  bin,
		args: func(addr, dir string) []string {
			return []string{"server", "--quiet",
				"--address", addr,
				"--certs-dir", filepath.Join(dir, "certs"), // else ~/.minio/certs is created
				filepath.Join(dir, "data")}
		},
		env: []string{
			"MINIO_ROOT_USER=" + S3AccessKey,
			"MINIO_ROOT_PASSWORD=" + S3SecretKey,
			"MINIO_BROWSER=off", // no console listener
			"MINIO_UPDATE=off",
		},
		dropEnv:   []string{"MINIO_"},
		readyPath: "/minio/health/ready",
	})
	if err != nil {
		return nil, err
	}
	if err := setAWSEnv(s.dir); err != nil {
		return nil, err
	}
	if err := createS3Bucket(s.addr); err != nil {
		return nil, fmt.Errorf("MinIO: create bucket %s: %w", Bucket, err)
	}
	return s, nil
}

// setAWSEnv points the AWS SDK's default credential chain at the MinIO root
// user and away from anything in the developer's ~/.aws or shell.
func setAWSEnv(dir string) error {
	empty := filepath.Join(dir, "aws-empty-config")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		return err
	}
	for _, k := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		if err := os.Unsetenv(k); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           S3AccessKey,
		"AWS_SECRET_ACCESS_KEY":       S3SecretKey,
		"AWS_CONFIG_FILE":             empty,
		"AWS_SHARED_CREDENTIALS_FILE": empty,
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

// createS3Bucket creates Bucket with a SigV4-signed PUT.
func createS3Bucket(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := s3.New(s3.Options{
		Region:       S3Region,
		BaseEndpoint: aws.String("http://" + addr),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(S3AccessKey, S3SecretKey, ""),
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if errors.As(err, &owned) {
		return nil
	}
	return err
}

// S3URL is S3 for code without a testing.TB (a package's store factory
// chosen in TestMain): it returns a fresh store URL whose prefix starts with
// name, or the error that S3 would skip or fail the test with.
func S3URL(name string) (string, error) {
	s, err := minio()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("s3://%s?prefix=%s-%d/&endpoint=http://%s&region=%s&use_path_style=true",
		Bucket, name, urlSeq.Add(1), s.addr, S3Region), nil
}

var urlSeq atomic.Int64

// PausableS3 starts a MinIO server for the calling test alone (killed when
// the test ends) and returns the URL of a fresh store on it and the server.
// The test may Pause the server (SIGSTOP: connections are accepted by the
// kernel but nothing answers, as in a hung or partitioned store) and
// Resume it, without disturbing the tests that share the server of S3.
// Skipped like S3 without a minio binary.
func PausableS3(t testing.TB) (string, *Server) {
	t.Helper()
	bin, err := findBinary("minio", "MinIO")
	need(t, "S3 (MinIO)", err)
	s, err := startMinIOAt(bin)
	if err != nil {
		t.Fatalf("starting a dedicated MinIO: %v", err)
	}
	srv := &Server{s: s}
	t.Cleanup(func() {
		_ = srv.Resume()
		s.stop()
	})
	return fmt.Sprintf("s3://%s?prefix=%s&endpoint=http://%s&region=%s&use_path_style=true",
		Bucket, uniquePrefix(t), s.addr, S3Region), srv
}

// Server is a server started for one test (see PausableS3).
type Server struct{ s *server }

// Pause stops the server's processes (SIGSTOP) until Resume. Linux only:
// elsewhere it returns errors.ErrUnsupported.
func (s *Server) Pause() error { return signalGroup(s.s.cmd.Process, sigStop) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return signalGroup(s.s.cmd.Process, sigCont) }
