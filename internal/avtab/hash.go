package avtab

import (
	"encoding/binary"

	"github.com/xdpfab/xdpfab/bpf"
)

// hashAddr is bpf.AVHash (the XDP program's av_hash) of src, read in
// place: bpf.AVHash takes the address by value, and the copy of its 20
// bytes (two overlapping 16-byte moves) costs a store-forwarding stall on
// every insert. TestHashMatchesBPF holds the two equal.
func hashAddr(seed uint64, src *bpf.Addr) uint64 {
	w0 := binary.LittleEndian.Uint64(src.Addr[0:8])
	w1 := binary.LittleEndian.Uint64(src.Addr[8:16])
	w2 := uint64(src.Port) | uint64(src.Family)<<16
	return mix(mix(mix(seed, w0), w1), w2)
}

// hashSlot is hashAddr of the source slot s holds.
func hashSlot(seed uint64, s *bpf.AVSlot) uint64 {
	w0 := binary.LittleEndian.Uint64(s.Addr[0:8])
	w1 := binary.LittleEndian.Uint64(s.Addr[8:16])
	w2 := uint64(s.Port) | uint64(s.Family)<<16
	return mix(mix(mix(seed, w0), w1), w2)
}

func mix(h, w uint64) uint64 {
	h ^= w
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>32
}
