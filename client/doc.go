// Package client talks to the xdpfab node agent (`xdpfab agent`) over its
// Unix control socket. Applications without privileges use it to manage
// named address vectors and to open endpoints whose sockets the agent
// creates; the CLI uses it for everything it asks of the agent.
//
// The protocol is one JSON request per SOCK_SEQPACKET message and one JSON
// response per request, in order, with file descriptors (AF_XDP sockets,
// UMEM memory) attached as SCM_RIGHTS where a response carries them. Errors
// travel as libfabric errno values and come back as errors wrapping
// fi.Errno, so errors.Is(err, fi.EBUSY) works across the socket.
//
// Who may connect is decided by the socket file's owner, group and mode;
// the agent also records each peer's credentials (SO_PEERCRED) and releases
// what a connection owned when it closes, including when its process dies.
package client
