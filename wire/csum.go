package wire

import (
	"encoding/binary"
	"math/bits"
)

// The Internet checksum (RFC 1071) in 64-bit words. A ones' complement sum
// does not depend on byte order as long as the words start at even
// offsets: the sum of little-endian words, folded to 16 bits and
// byte-swapped, is the sum of the big-endian 16-bit words. One add with
// carry per eight bytes (ADC on amd64) instead of one add per two: at an
// MTU-sized message it halves building a frame (BenchmarkFramePut). Summing
// while copying the payload measured no faster than copying, then summing
// the cache-hot bytes, so Put does the latter. Where
// the kernel completes the checksum instead, see
// docs/platform.md#udp-checksums-over-veth.

// sum adds b's big-endian 16-bit words (an odd last byte as the high byte
// of a word) to acc, as a 32-bit ones' complement accumulator that fold
// reduces.
func sum(b []byte, acc uint32) uint32 {
	if len(b) < 16 {
		for len(b) >= 2 {
			acc += uint32(binary.BigEndian.Uint16(b))
			b = b[2:]
		}
		if len(b) == 1 {
			acc += uint32(b[0]) << 8
		}
		return acc
	}
	return acc + uint32(bits.ReverseBytes16(fold64(sum64(b, 0))))
}

// sum64 adds b's little-endian 64-bit words to acc with end-around carry
// (a short last word padded with zeros).
func sum64(b []byte, acc uint64) uint64 {
	var c uint64
	i := 0
	for ; i+32 <= len(b); i += 32 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[i:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[i+8:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[i+16:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[i+24:]), c)
	}
	for ; i+8 <= len(b); i += 8 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[i:]), c)
	}
	if i < len(b) {
		var t [8]byte
		copy(t[:], b[i:])
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(t[:]), c)
	}
	acc, c = bits.Add64(acc, 0, c)
	return acc + c
}

// fold64 folds a 64-bit ones' complement sum to 16 bits.
func fold64(s uint64) uint16 {
	s = s&0xffffffff + s>>32
	s = s&0xffffffff + s>>32
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return uint16(s)
}
