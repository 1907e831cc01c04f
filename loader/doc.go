// Package loader loads xdpfab's XDP program and maps into the kernel,
// attaches the program to interfaces, and pins everything under a bpffs
// directory so that other processes (and a restarted agent) re-open the same
// maps instead of replacing them.
//
// Objects is the set of kernel objects one node shares: the forward and
// reverse AV maps, the endpoint table, the XSKMAP and the counters. With an
// empty Config.PinRoot the objects are private to the process and vanish
// with it (what tests and benchmarks use); with a PinRoot they outlive it.
//
// The loader does not know what an address vector or an endpoint is; the av
// and ep packages write the maps it hands out.
//
// BPF and XDP are Linux's: elsewhere the package builds, so that code
// using it can be written there, and Load, OpenPinned and FromFDs fail with
// fi.EOPNOTSUPP (bpffs_other.go).
//
// A nil *Objects, or one that did not come from Load, OpenPinned or
// FromFDs (its zero value), is never a panic: its methods with an error
// result fail with fi.EINVAL, the others return zero values or do nothing
// (Lock's unlock included), and Close and Unpin return nil (nothing to
// release). A nil or zero Attachment's Close and Detach return nil.
package loader
