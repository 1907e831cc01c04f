package ctl

import "github.com/xdpfab/xdpfab/ep"

// The types of the same-host operations (OpLocalAttach, OpLocalConnect,
// OpLocalAccept): the agent sets up shared-memory channels between
// endpoints it prepared, so that an endpoint sends to another endpoint of
// the node without the network.

// LocalEPArgs names an endpoint the caller opened.
type LocalEPArgs struct {
	ID uint32 `json:"id"`
}

// LocalConnectArgs asks for a channel from endpoint ID to Dest
// ("ADDR:PORT", an address of this node).
type LocalConnectArgs struct {
	ID   uint32 `json:"id"`
	Dest string `json:"dest"`
}

// LocalAcceptResult lists new channels, in the order of the descriptors.
type LocalAcceptResult struct {
	Channels []ep.LocalChannelInfo `json:"channels"`
}

// MaxLocalAccept bounds the channels one OpLocalAccept reply carries.
const MaxLocalAccept = 64
