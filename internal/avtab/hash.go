package avtab

import "github.com/xdpfab/xdpfab/bpf"

// hashAddr is bpf.AVHash (the XDP program's av_hash) of src, read in
// place (bpf.AVHashOf): passing the 20-byte Addr by value costs a
// store-forwarding stall on every insert.
func hashAddr(seed uint64, src *bpf.Addr) uint64 {
	return bpf.AVHashOf(seed, &src.Addr, src.Port, src.Family)
}

// hashSlot is hashAddr of the source slot s holds.
func hashSlot(seed uint64, s *bpf.AVSlot) uint64 {
	return bpf.AVHashOf(seed, &s.Addr, s.Port, s.Family)
}
