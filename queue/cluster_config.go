package queue

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"
)

// The public configuration of cluster mode: ClusterConfig, WithCluster
// (which validates it) and Role. How cluster mode works is described in
// CLUSTER.md.

// ClusterConfig configures cluster mode (see WithCluster).
type ClusterConfig struct {
	// Listen is the address this process serves the cluster's members on
	// while it is the writer, e.g. "127.0.0.1:0" or ":7420". A member
	// binds it only while it tries to become the writer, when the store
	// may be free. A port that is not a number from 0 to 65535 is
	// ErrInvalidOption; an address no process can listen on (a host that
	// does not resolve or is not this machine's, a port it may not use)
	// fails Open, rather than a look for a writer that ends with ctx.
	Listen string
	// Advertise is the address members dial, written into the store: a
	// host and a port from 1 to 65535 (build it with net.JoinHostPort);
	// anything else is ErrInvalidOption. It defaults to
	// Listen's address as bound, with the host name in place of an
	// unspecified host (":7420" -> "HOSTNAME:7420").
	Advertise string
	// TLS, if set, secures the cluster's calls: this process serves with
	// it as the writer (Certificates; ClientAuth and ClientCAs for mutual
	// TLS) and dials with it as a member (RootCAs; Certificates for mutual
	// TLS). Nil: plaintext HTTP/2, each call authenticated by the epoch's
	// secret only, for a trusted network.
	TLS *tls.Config
	// DialTimeout bounds how long a member waits for a writer it found in
	// the store to answer before it looks again. Defaults to 2s.
	DialTimeout time.Duration
}

// Role is what this process is to a store in cluster mode.
type Role uint8

// Roles.
const (
	// RoleWriter: this process is the store's writer; in cluster mode it
	// also serves the members.
	RoleWriter Role = iota + 1
	// RoleMember: another process is the writer; this one forwards every
	// operation to it, and takes over when the store says it is dead.
	RoleMember
	// RoleReadOnly: opened WithReadOnly; it reads the store, writes nothing.
	RoleReadOnly
)

func (r Role) String() string {
	switch r {
	case RoleWriter:
		return "writer"
	case RoleMember:
		return "member"
	case RoleReadOnly:
		return "read-only"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// WithCluster opens the store in cluster mode: any number of processes
// open the same URL with it, one is the writer and the others are members
// that forward to it, and a member takes over when the writer dies. See
// the package documentation, "Cluster mode".
func WithCluster(c ClusterConfig) Option {
	return func(o *options) error {
		if c.Listen == "" {
			return invalid("cluster: Listen must be set (e.g. \"127.0.0.1:0\")")
		}
		if _, port, err := net.SplitHostPort(c.Listen); err != nil {
			return invalid("cluster: Listen %q: %v", c.Listen, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return invalid("cluster: Listen %q: want a port number from 0 to 65535", c.Listen)
		}
		if c.Advertise != "" {
			// Dialled by the other processes: a host is needed (an
			// address built from an unset variable has none), and a port
			// one can dial (not 0).
			host, port, err := net.SplitHostPort(c.Advertise)
			if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
				return invalid("cluster: Advertise %q: want a host and a port members can dial (1 to 65535)", c.Advertise)
			}
		}
		if c.DialTimeout < 0 {
			return invalid("cluster: DialTimeout must not be negative")
		}
		if c.DialTimeout == 0 {
			c.DialTimeout = 2 * time.Second
		}
		o.cluster = &c
		return nil
	}
}

// Role reports what this process is to the store: RoleWriter, RoleMember
// (cluster mode only) or RoleReadOnly. A member's role changes to
// RoleWriter when it takes over, and a writer's to RoleMember if another
// process fenced it.
func (q *Queue) Role() Role {
	if c, ok := q.be.(*clustered); ok {
		return c.role()
	}
	if q.opts.readOnly {
		return RoleReadOnly
	}
	return RoleWriter
}
