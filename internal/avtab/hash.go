package avtab

import (
	"encoding/binary"

	"github.com/xdpfab/xdpfab/bpf"
)

// hashAddr is bpf.AVHash (the XDP program's av_hash) of src, read in
// place: passing the 20-byte Addr by value costs a store-forwarding stall
// on every insert.
func hashAddr(seed uint64, src *bpf.Addr) uint64 {
	return bpf.AVHashWords(seed, binary.NativeEndian.Uint64(src.Addr[0:8]), binary.NativeEndian.Uint64(src.Addr[8:16]),
		uint64(src.Port)|uint64(src.Family)<<16)
}

// hashSlot is hashAddr of the source slot s holds.
func hashSlot(seed uint64, s *bpf.AVSlot) uint64 {
	return bpf.AVHashWords(seed, binary.NativeEndian.Uint64(s.Addr[0:8]), binary.NativeEndian.Uint64(s.Addr[8:16]),
		uint64(s.Port)|uint64(s.Family)<<16)
}
