package dataplane

// The AF_XDP user API (linux/if_xdp.h) that this package uses, defined here
// so that the package builds on every system: the values are the same on
// every Linux architecture, and uapi_linux.go checks them against
// golang.org/x/sys/unix at compile time. Socket-level options and mmap
// flags, whose values differ between architectures, come from x/sys/unix
// in sys_linux.go.

// Socket options at level solXDP.
const (
	solXDP = 283 // SOL_XDP

	optMmapOffsets        = 1 // XDP_MMAP_OFFSETS
	optRxRing             = 2 // XDP_RX_RING
	optTxRing             = 3 // XDP_TX_RING
	optUmemReg            = 4 // XDP_UMEM_REG
	optUmemFillRing       = 5 // XDP_UMEM_FILL_RING
	optUmemCompletionRing = 6 // XDP_UMEM_COMPLETION_RING
	optStatistics         = 7 // XDP_STATISTICS
	optOptions            = 8 // XDP_OPTIONS
	optMaxTxSkbBudget     = 9 // XDP_MAX_TX_SKB_BUDGET
)

// mmap offsets of the rings.
const (
	pgoffRxRing             = 0           // XDP_PGOFF_RX_RING
	pgoffTxRing             = 0x80000000  // XDP_PGOFF_TX_RING
	pgoffUmemFillRing       = 0x100000000 // XDP_UMEM_PGOFF_FILL_RING
	pgoffUmemCompletionRing = 0x180000000 // XDP_UMEM_PGOFF_COMPLETION_RING
)

// Flags of struct sockaddr_xdp (sxdp_flags).
const (
	sxdpSharedUmem    = 1 << 0 // XDP_SHARED_UMEM
	sxdpCopy          = 1 << 1 // XDP_COPY
	sxdpZeroCopy      = 1 << 2 // XDP_ZEROCOPY
	sxdpUseNeedWakeup = 1 << 3 // XDP_USE_NEED_WAKEUP
	sxdpUseSG         = 1 << 4 // XDP_USE_SG
)

// AF_XDP TX metadata (linux/if_xdp.h, Linux 6.11 and later for the UMEM
// flag): struct xsk_tx_metadata in front of a transmitted packet.
const (
	umemTxMetadataLen = 1 << 2 // XDP_UMEM_TX_METADATA_LEN, in xdp_umem_reg.flags
	txmdFlagsChecksum = 1 << 1 // XDP_TXMD_FLAGS_CHECKSUM
	// TxMetadataLen is sizeof(struct xsk_tx_metadata): flags (u64), then
	// the request: csum_start (u16), csum_offset (u16), launch_time (u64).
	TxMetadataLen = 24
)

const (
	ringNeedWakeup    = 1   // XDP_RING_NEED_WAKEUP, in a ring's flags
	optionsZeroCopy   = 1   // XDP_OPTIONS_ZEROCOPY, in struct xdp_options
	xdpPacketHeadroom = 256 // XDP_PACKET_HEADROOM
)

// sockaddrXDP is struct sockaddr_xdp without its family (xskBind adds it).
type sockaddrXDP struct {
	Flags        uint16
	Ifindex      uint32
	QueueID      uint32
	SharedUmemFD uint32
}

// xdpRingOffset is struct xdp_ring_offset: where a ring's fields lie in its
// mapping.
type xdpRingOffset struct {
	Producer uint64
	Consumer uint64
	Desc     uint64
	Flags    uint64
}

// xdpMmapOffsets is struct xdp_mmap_offsets (XDP_MMAP_OFFSETS).
type xdpMmapOffsets struct {
	Rx xdpRingOffset
	Tx xdpRingOffset
	Fr xdpRingOffset
	Cr xdpRingOffset
}

// xdpUmemReg is struct xdp_umem_reg (XDP_UMEM_REG).
type xdpUmemReg struct {
	Addr            uint64
	Len             uint64
	Size            uint32
	Headroom        uint32
	Flags           uint32
	Tx_metadata_len uint32
}

// xdpStatistics is struct xdp_statistics (XDP_STATISTICS).
type xdpStatistics struct {
	Rx_dropped               uint64
	Rx_invalid_descs         uint64
	Tx_invalid_descs         uint64
	Rx_ring_full             uint64
	Rx_fill_ring_empty_descs uint64
	Tx_ring_empty_descs      uint64
}
