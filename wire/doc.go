// Package wire is the xdpfab wire format in one place (docs/wire.md is its
// description): the 32-byte xdpfab header at the start of every datagram's
// UDP payload (Hdr, PutHdr, ParseHdr), the 32-byte metadata the XDP
// program writes in front of every frame it redirects (Meta, ParseMeta),
// the sender's address as a frame shows it (Source, AppendSourceSockaddr),
// and a builder for whole Ethernet/VLAN/IP/UDP/xdpfab frames (Frame): the
// endpoint's transmit path writes its frames with it, and tests feed them
// to the XDP program.
//
// The C side of the same layout is bpf/xdpfab_structs.h (struct wire_hdr,
// struct rx_meta) and bpf/xdpfab_consts.h; the bpf package's tests check
// this package's constants and offsets against them. The Put functions
// write into caller-provided buffers and never allocate; given a buffer too
// short (or a nil Frame) they write nothing and return 0, and the Parse
// functions report a short or foreign input with ok false: nothing here
// panics on nil or zero values.
package wire
