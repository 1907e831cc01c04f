package fi

import "fmt"

// Addr is a fabric address handle (libfabric's fi_addr_t): an index into an
// address vector, possibly with a receive context or peer group encoded in
// its high bits.
type Addr uint64

// Reserved address values. They share libfabric's single all-ones value.
const (
	// AddrNotAvail marks an address that could not be inserted, or a source
	// that is not in the address vector.
	AddrNotAvail Addr = ^Addr(0)
	// AddrUnspec means "any address" where an operation accepts one.
	AddrUnspec Addr = ^Addr(0)
	// KeyNotAvail marks an unavailable auth key (FI_KEY_NOTAVAIL).
	KeyNotAvail uint64 = ^uint64(0)
)

// RxAddr returns the address of receive context rxIndex of the endpoint at
// addr, with rxCtxBits the number of high bits the receiver reserved for
// context indices (fi_rx_addr).
func RxAddr(addr Addr, rxIndex int, rxCtxBits int) Addr {
	if rxCtxBits <= 0 {
		return addr
	}
	return Addr(uint64(rxIndex)<<(64-rxCtxBits)) | addr
}

// GroupAddr returns addr tagged with peer group id (fi_group_addr).
func GroupAddr(addr Addr, group uint32) Addr {
	return Addr(uint64(group)<<32) | addr
}

// String formats an address as a decimal index, or "NOTAVAIL".
func (a Addr) String() string {
	if a == AddrNotAvail {
		return "NOTAVAIL"
	}
	return fmt.Sprintf("%d", uint64(a))
}
