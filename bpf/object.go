package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

var objectSHA256 = sync.OnceValue(func() string {
	sum := sha256.Sum256(_KernBytes)
	return hex.EncodeToString(sum[:])
})

// ObjectSHA256 is the hex SHA-256 of the BPF object embedded in this
// binary (xdpfab_bpfel.o): which XDP program and map layout a build loads.
// `xdpfab version` and the agent's xdpfab_build_info report it; `sha256sum
// bpf/xdpfab_bpfel.o` in a source tree gives the same value.
func ObjectSHA256() string { return objectSHA256() }
