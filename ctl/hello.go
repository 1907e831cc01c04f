package ctl

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// Version is the protocol version this package speaks. It changes
// whenever a message changes meaning or shape in a way the other side
// could misread; the handshake refuses a peer of another version.
//
// 2: the endpoint sockets the agent hands over are bound multi-buffer
// (XDP_USE_SG): a client of version 1 would read a jumbo frame's chain of
// descriptors as separate frames.
//
// 3: maps.open takes the AV whose table the client wants (MapsOpenArgs):
// every AV's table no longer fits one message on a node with many AVs, and
// an agent of version 2 refuses the field.
const Version = 3

// HelloArgs opens a connection.
type HelloArgs struct {
	// Version is the client's protocol version.
	Version int `json:"version"`
	// Client names the client program, for the agent's log.
	Client string `json:"client,omitempty"`
}

// HelloResult is the agent's side of the handshake.
type HelloResult struct {
	// Version is the agent's protocol version.
	Version int `json:"version"`
	// Agent names the agent's build (module version), for diagnostics.
	Agent string `json:"agent,omitempty"`
}

// CheckVersion returns nil when peer equals Version, else an error
// wrapping fi.ENOPROTOOPT that names both versions. side is "agent" or
// "client": the peer's role, for the message.
func CheckVersion(side string, peer int) error {
	if peer == Version {
		return nil
	}
	return fmt.Errorf("xdpfab control protocol mismatch: this side speaks version %d, the %s speaks version %d; run an xdpfab client and agent of the same release: %w",
		Version, side, peer, fi.ENOPROTOOPT)
}
