// Package cluster is the transport of cluster mode: how the member
// processes of a store call its writer. It knows nothing of queues; the
// queue package registers its operations as methods and calls them.
//
// # Transport
//
// gRPC over HTTP/2 (keepalive, deadlines, health checks, interceptors that
// OpenTelemetry instruments), with one service whose methods the caller
// registers by name, and a msgpack codec (Codec, content-subtype
// "stepwell-msgpack") in place of protobuf, so no protoc step: requests
// and replies are Messages, Go structs that encode themselves as the
// field-numbered structs of internal/format (see its documentation,
// "Field-numbered messages"), without reflection.
//
// The hot methods (Config.Pipe: a member's commit calls) go over one
// long-lived bidirectional stream per client, the pipe, instead of a
// unary call each: a call is then one message each way, without a new
// HTTP/2 stream, headers and trailers, or authentication of its own (see
// pipeMethod). Calls on the pipe are concurrent and answered in any order.
//
// # Trust
//
// A writer serves one epoch (the WAL sequence of its open marker) and
// draws a random secret for it; both go into the store's owner object with
// its address, so whoever can read the store can join the cluster, and
// nobody else can. Every call carries the epoch and the secret as metadata:
//
//   - a call without them, or with a wrong secret, is refused with
//     codes.Unauthenticated (ErrUnauthenticated at the caller);
//   - a call for another epoch is refused with codes.FailedPrecondition
//     (ErrStaleEpoch), whatever secret it carries (each epoch has its
//     own): the member read an older or newer owner object than the
//     writer it reached, and must read the owner object again;
//
// before any handler runs, so a refused call changes nothing. The pipe is
// authenticated once, as it opens, and each reply on it names the
// writer's epoch, which the client checks as it does a unary reply's
// header; a reply of another epoch breaks the pipe, and the calls on it
// fail as a broken pipe's do (codes.Unavailable: their outcome is
// unknown, for they reached a writer), not as refused. Every call and reply also carries the wire version
// (WireVersion): a member and a writer of releases whose messages differ
// refuse each other (codes.FailedPrecondition, ErrWireVersion), so a
// cluster of mixed releases fails clearly instead of misreading messages.
// Refusals are
// logged at WARN, at most one line per second with a count of the rest.
// Every reply carries the server's epoch in its header, and the client
// refuses a reply from another epoch: a member never acts on a deposed
// writer's answer. The secret travels in the clear unless TLS is set; with
// TLS (Config.TLS, mutual when the configs ask for client certificates)
// the channel is encrypted and authenticated as well.
package cluster
