// Package ep implements xdpfab's datagram endpoints (FI_EP_DGRAM): they
// send and receive xdpfab messages over AF_XDP sockets and report every
// operation to completion queues, each receive naming its sender by the
// fi_addr (or user ID) the XDP program computed in the kernel. No lookup of
// the source happens in user space.
//
// An Endpoint binds a local address and UDP port on one interface to an
// address vector and two completion queues. Opening it creates one AF_XDP
// socket per (receive context, rx queue) over a shared UMEM, puts them in
// the XDP program's XSKMAP and registers the endpoint in its endpoint table,
// so datagrams to the address and port are redirected to it. The XDP
// program must be attached to the interface (loader.Objects.Attach).
//
// Operations follow fi_msg(3) and fi_tagged(3): Send, SendData, Inject,
// TSend, TSendData, TInject, Recv, RecvMsg (FI_MULTI_RECV), TRecv, Cancel.
// Receive contexts (Attr.RxContexts, fi_rx_addr) steer messages in the
// kernel; peer groups (fi_group_addr) are carried on the wire and matched
// on receive.
//
// Message size: MaxMsgSize is the interface's MTU (read at open) less the
// IP, UDP and xdpfab headers (8940 bytes at MTU 9000 over IPv4); a longer
// send is fi.EMSGSIZE. A message longer than a UMEM frame travels as a
// chain of frames (AF_XDP multi-buffer: the sockets are bound with
// XDP_USE_SG), gathered on receive into a reused buffer; the send and
// receive paths allocate nothing for it once warm. See
// docs/semantics.md#message-size.
//
// Many processes on one queue: a device queue belongs to one UMEM, so the
// endpoints of several processes that receive on it share one. A Domain
// (NewDomain, made by the agent per uid or declared group) is that UMEM,
// the queues' rings and a dataplane.ShareBlock; Domain.Prepare makes an
// endpoint in it for another process, with a share of the receive pool and
// transmit frames of its own, and Prepared.Reclaim takes back what it held
// once its process is gone. Attr.FirstQueue and Attr.Queues choose the rx
// queues; endpoints of one process on different queue ranges of an
// interface have devices of their own. See
// docs/ARCHITECTURE.md#many-processes-on-one-queue.
//
// Same-host peers: a send to an address of this host (which the kernel
// would loop back, never through the XDP program) goes through a
// shared-memory channel to the endpoint receiving at that address, set up
// on the first send by a party that vouches for the sender's address: this
// process, between endpoints it opened with Open, or the agent, between
// endpoints it prepared (EnableLocal, which package client calls). The
// receiver names the sender through its own AV exactly as the XDP program
// would (fi_addr, user ID, auth key, FI_ADDR_NOTAVAIL, FI_SOURCE_ERR or a
// counted drop), every matching and completion rule is the same, and it
// treats the channel's contents as hostile: a channel its sender broke is
// closed and counted (LocalStats), never a panic. See
// docs/ARCHITECTURE.md#same-host-peers and docs/SECURITY.md#same-host-channels.
//
// Progress is manual by default: the application's reads of the CQs poll
// the sockets, the low-latency mode. Attr.Progress = ProgressAuto runs a
// goroutine instead.
//
// An endpoint is safe for concurrent use by default (fi.ThreadSafe). An
// application that makes every call on its endpoints, and their CQs, from
// one goroutine at a time says so with Attr.Threading = fi.ThreadDomain
// and manual progress, and the data path then takes no locks (give its
// CQs cq.Attr.SingleProducer and SingleConsumer too); Endpoint.Threading
// reports the model an endpoint provides.
//
// Open an endpoint from a goroutine whose thread is in the interface's
// network namespace; afterwards it may be used from anywhere.
//
// Nil and zero values are errors, never panics. Open and Prepare given a
// nil, zero or read-only *loader.Objects fail with fi.EINVAL. An
// Endpoint or Prepared that is nil or did not come from Open, Adopt or
// Prepare (its zero value) fails every method with an error result with
// fi.EINVAL, and so does a nil *RxContext, which is what Rx returns for a
// context that does not exist; a closed Endpoint fails with
// fi.EOPBADSTATE. Methods without an error result return zero values
// (Closed reports true: nothing is open) or do nothing, and Close returns
// nil (nothing to release). The send and receive paths pay one predictable
// branch and still allocate nothing.
package ep
