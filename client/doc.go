// Package client talks to the xdpfab node agent (`xdpfab agent`) over its
// Unix control socket, in the protocol of package ctl. Applications without
// privileges use it to manage named address vectors and to open endpoints
// whose sockets the agent creates (OpenEndpoint: the agent prepares, the
// application runs the data path); the xdpfab command uses it for
// everything it asks of the agent.
//
// Dial runs ctl's version handshake, so a client and an agent of different
// protocol versions fail at connect with fi.ENOPROTOOPT instead of
// misreading each other. Errors the agent reports come back as
// *ctl.RemoteError wrapping fi.Errno, so errors.Is(err, fi.EBUSY) works
// across the socket.
//
// Who may connect is decided by the socket file's owner, group and mode;
// the agent also records each peer's credentials (SO_PEERCRED) and releases
// what a connection owned when it closes, including when its process dies.
package client
