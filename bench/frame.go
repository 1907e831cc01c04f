package main

import "github.com/xdpfab/xdpfab/bpf"

// wirePayload is the UDP payload of a frame: xdpfab header + payload. The
// socket peers send and receive exactly these bytes.
func wirePayload(h bpf.WireHdr, payload []byte) []byte {
	b := make([]byte, bpf.HdrLen+len(payload))
	bpf.PutHdr(b, h)
	copy(b[bpf.HdrLen:], payload)
	return b
}
