package main

import "github.com/xdpfab/xdpfab/wire"

// wirePayload is the UDP payload of a frame: xdpfab header + payload. The
// socket peers send and receive exactly these bytes.
func wirePayload(h wire.Hdr, payload []byte) []byte {
	b := make([]byte, wire.HdrLen+len(payload))
	wire.PutHdr(b, h)
	copy(b[wire.HdrLen:], payload)
	return b
}
