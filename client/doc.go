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
// A nil *Client, or one that did not come from Dial (its zero value),
// never panics: every request fails with fi.EINVAL, Agent returns the zero
// HelloResult and Close returns nil.
//
// Who may connect is decided by the socket file's owner, group and mode;
// the agent also records each peer's credentials (SO_PEERCRED) and releases
// what a connection owned when it closes, including when its process dies.
//
// # Off Linux
//
// The agent and the data path are Linux's (XDP, AF_XDP, BPF maps,
// rtnetlink), but this package and everything it imports build on other
// systems too, so an application that imports it can be written, built
// and unit-tested on macOS (make cross checks that it stays so). Package
// cq works there in full, with a pipe in place of the eventfd of
// cq.WaitFD, so an application's completion handling can be tested
// against CQs its tests fill through cq.Producer. Every call that needs
// the agent, AF_XDP, BPF or netlink fails with an error wrapping
// fi.EOPNOTSUPP: Dial, OpenAVPinned, and below them loader.Load,
// dataplane.Open and neigh.New.
package client
