// Package ctl is the xdpfab control protocol: what the node agent
// (package agent) and its clients (package client, the xdpfab command)
// say to each other over the agent's Unix socket, and nothing else.
//
// # Transport
//
// One SOCK_SEQPACKET connection per client. Every request is one message
// and is answered by exactly one message, in order. A message is a JSON
// document (a Request or a Response) of at most MaxMessage bytes; file
// descriptors (AF_XDP sockets, UMEM memory, read-only map handles) travel
// beside the agent's replies as SCM_RIGHTS, at most MaxFDs per message.
// Clients send none: the agent has the kernel refuse them where it can
// (SO_PASSRIGHTS, Linux 6.16), and otherwise refuses the request (EINVAL)
// and closes them in the background (ReadMsgKeepFDs). WriteMsg and
// ReadMsg frame messages; ReadMsg tells an empty message (an error,
// EINVAL) from the end of the connection (io.EOF).
//
// A peer's strings reach a log line or an error message only through
// Clean or Quote (cut to MaxQuoted bytes, escaped), and an error response
// carries at most MaxErrorText bytes of message (ClipText).
//
// # Handshake
//
// The first request on a connection must be OpHello with the client's
// protocol Version. The agent answers with its own version, or refuses a
// client of another version with ENOPROTOOPT and a message naming both
// versions, then ends the connection: a message is never parsed under
// another version's rules. Any other first request is refused the same way
// (a client that predates the handshake).
//
// # Operations
//
// Each operation is an Op value that names it and fixes the Go types of
// its arguments and result (OpAVInsert is an Op[AVInsertArgs,
// InsertResult]). The agent registers one typed handler per Op; the client
// calls through the same Op value, so both sides agree on the types at
// compile time. Ops lists every operation. Adding one means: an Op value
// and its types here, a handler in the agent's table, a method in package
// client.
//
// # Errors
//
// A failed request comes back with a libfabric errno (fi.Errno) and a
// message. RemoteError rebuilds it on the client side so that
// errors.Is(err, fi.EBUSY) holds across the socket.
//
// Nil values are never a panic: WriteMsg and ReadMsg on a nil connection
// and Err on a nil *Response fail with fi.EINVAL, a nil *RemoteError
// prints as "<nil>" and unwraps to nil, and ErrorResponse with a nil error
// answers fi.EOTHER.
package ctl
