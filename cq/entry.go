package cq

import "github.com/xdpfab/xdpfab/fi"

// Entry is one successful completion as Read returns it. Its fields are
// those of struct fi_cq_tagged_entry, in that order; the smaller libfabric
// formats are prefixes of it, and the CQ's Format says how many fields Read
// fills (the rest are zero):
//
//	FormatContext  OpContext                          (fi_cq_entry)
//	FormatMsg      OpContext Flags Len                (fi_cq_msg_entry)
//	FormatData     OpContext Flags Len Buf Data       (fi_cq_data_entry)
//	FormatTagged   OpContext Flags Len Buf Data Tag   (fi_cq_tagged_entry)
//
// The field meanings are fi_cq(3)'s "Completion fields".
type Entry struct {
	// OpContext is the context the application gave the operation, or nil
	// for completions not tied to a posted operation. An interface holding
	// a pointer costs no allocation to store or return.
	OpContext any
	// Flags are the completion flags: fi.Send or fi.Recv with fi.Msg or
	// fi.Tagged, fi.RemoteCQData, fi.MultiRecv, ...
	Flags fi.Flags
	// Len is the number of bytes received (receives only).
	Len int
	// Buf is where the data was placed in a multi-receive buffer
	// (fi.MultiRecv receives only). libfabric's void *buf; the slice
	// carries the pointer and, as its length, Len.
	Buf []byte
	// Data is the remote CQ data, in host byte order, valid when Flags has
	// fi.RemoteCQData.
	Data uint64
	// Tag is the received tag (tagged receives only).
	Tag uint64
}

// ErrEntry is one error completion as ReadErr returns it: struct
// fi_cq_err_entry (API 1.20 and later), field for field, except that
// err_data and err_data_size are one slice, ErrData.
type ErrEntry struct {
	OpContext any
	Flags     fi.Flags
	Len       int
	Buf       []byte
	Data      uint64
	Tag       uint64
	// OLen is the number of bytes that did not fit the receive buffer and
	// were discarded (with Err fi.ETRUNC).
	OLen int
	// Err is the positive fabric errno: why the operation failed, or, with
	// fi.EADDRNOTAVAIL, that the data arrived but its source is not in the
	// address vector (FI_SOURCE_ERR).
	Err fi.Errno
	// ProvErrno is the provider's own error code; see CQ.StrError.
	ProvErrno int
	// ErrData is both an input and an output, with libfabric's two rules:
	//
	//   - On input with len(ErrData) == 0 (libfabric's err_data_size == 0),
	//     ReadErr points ErrData at a buffer the CQ owns, valid until the
	//     next read call on the CQ.
	//   - On input with len(ErrData) > 0, ReadErr copies min(len(ErrData),
	//     size of the error data) bytes into it and shortens ErrData to the
	//     number of bytes copied (err_data_size on output).
	//
	// Passing back the CQ-owned buffer from an earlier ReadErr counts as
	// len 0, so an ErrEntry can be reused across calls.
	//
	// For fi.EADDRNOTAVAIL, ErrData is the sender's raw address: a 16-byte
	// struct sockaddr_in or a 28-byte struct sockaddr_in6 in Linux layout
	// (family in host byte order, port and address in network byte order),
	// the FI_SOCKADDR_IN / FI_SOCKADDR_IN6 format the av package inserts.
	ErrData []byte
	// SrcAddr is the source of a failed receive when the endpoint has
	// fi.Source and the sender is known, else fi.AddrNotAvail.
	SrcAddr fi.Addr
}

// Completion is what a producer (an endpoint of the dataplane) writes: the
// entry, its source and, for a failed operation, the error details.
type Completion struct {
	Entry

	// Src is the sender, already chosen by the producer: its fi_addr, or
	// its user ID when the address vector uses fi.AVUserID. The CQ
	// reports it to ReadFrom only if the binding has fi.Source.
	Src fi.Addr
	// SrcUnknown says the sender is not in the address vector. With
	// fi.Source it is reported as fi.AddrNotAvail; with fi.SourceErr a
	// successful completion becomes an error completion (Err
	// fi.EADDRNOTAVAIL, ErrData = SrcRaw).
	SrcUnknown bool
	// SrcRaw is the unknown sender's raw address (see ErrEntry.ErrData for
	// the layout). It is copied; the producer may reuse the memory.
	SrcRaw []byte

	// Err, non-zero, makes this an error completion.
	Err fi.Errno
	// ProvErrno, OLen and ErrData are reported in the ErrEntry; they must
	// be zero for a successful completion. ErrData is copied.
	ProvErrno int
	OLen      int
	ErrData   []byte
}
