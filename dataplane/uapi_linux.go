//go:build linux

package dataplane

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// uapi.go checked against x/sys/unix. A line of the constant block compiles
// only if its two values are equal (a negative constant does not convert
// to uint); a struct converts only to a type with the same fields in the
// same order, so the layouts the kernel reads and writes are the same.
const (
	_ = uint(solXDP-unix.SOL_XDP) + uint(unix.SOL_XDP-solXDP)

	_ = uint(optMmapOffsets-unix.XDP_MMAP_OFFSETS) + uint(unix.XDP_MMAP_OFFSETS-optMmapOffsets)
	_ = uint(optRxRing-unix.XDP_RX_RING) + uint(unix.XDP_RX_RING-optRxRing)
	_ = uint(optTxRing-unix.XDP_TX_RING) + uint(unix.XDP_TX_RING-optTxRing)
	_ = uint(optUmemReg-unix.XDP_UMEM_REG) + uint(unix.XDP_UMEM_REG-optUmemReg)
	_ = uint(optUmemFillRing-unix.XDP_UMEM_FILL_RING) + uint(unix.XDP_UMEM_FILL_RING-optUmemFillRing)
	_ = uint(optUmemCompletionRing-unix.XDP_UMEM_COMPLETION_RING) + uint(unix.XDP_UMEM_COMPLETION_RING-optUmemCompletionRing)
	_ = uint(optStatistics-unix.XDP_STATISTICS) + uint(unix.XDP_STATISTICS-optStatistics)
	_ = uint(optOptions-unix.XDP_OPTIONS) + uint(unix.XDP_OPTIONS-optOptions)
	_ = uint(optMaxTxSkbBudget-unix.XDP_MAX_TX_SKB_BUDGET) + uint(unix.XDP_MAX_TX_SKB_BUDGET-optMaxTxSkbBudget)

	_ = uint(pgoffRxRing-unix.XDP_PGOFF_RX_RING) + uint(unix.XDP_PGOFF_RX_RING-pgoffRxRing)
	_ = uint(pgoffTxRing-unix.XDP_PGOFF_TX_RING) + uint(unix.XDP_PGOFF_TX_RING-pgoffTxRing)
	_ = uint(pgoffUmemFillRing-unix.XDP_UMEM_PGOFF_FILL_RING) + uint(unix.XDP_UMEM_PGOFF_FILL_RING-pgoffUmemFillRing)
	_ = uint(pgoffUmemCompletionRing-unix.XDP_UMEM_PGOFF_COMPLETION_RING) + uint(unix.XDP_UMEM_PGOFF_COMPLETION_RING-pgoffUmemCompletionRing)

	_ = uint(sxdpSharedUmem-unix.XDP_SHARED_UMEM) + uint(unix.XDP_SHARED_UMEM-sxdpSharedUmem)
	_ = uint(sxdpCopy-unix.XDP_COPY) + uint(unix.XDP_COPY-sxdpCopy)
	_ = uint(sxdpZeroCopy-unix.XDP_ZEROCOPY) + uint(unix.XDP_ZEROCOPY-sxdpZeroCopy)
	_ = uint(sxdpUseNeedWakeup-unix.XDP_USE_NEED_WAKEUP) + uint(unix.XDP_USE_NEED_WAKEUP-sxdpUseNeedWakeup)
	_ = uint(sxdpUseSG-unix.XDP_USE_SG) + uint(unix.XDP_USE_SG-sxdpUseSG)
	_ = uint(PktContd-unix.XDP_PKT_CONTD) + uint(unix.XDP_PKT_CONTD-PktContd)

	_ = uint(umemTxMetadataLen-unix.XDP_UMEM_TX_METADATA_LEN) + uint(unix.XDP_UMEM_TX_METADATA_LEN-umemTxMetadataLen)
	_ = uint(txmdFlagsChecksum-unix.XDP_TXMD_FLAGS_CHECKSUM) + uint(unix.XDP_TXMD_FLAGS_CHECKSUM-txmdFlagsChecksum)
	_ = uint(DescTxMetadata-unix.XDP_TX_METADATA) + uint(unix.XDP_TX_METADATA-DescTxMetadata)

	_ = uint(ringNeedWakeup-unix.XDP_RING_NEED_WAKEUP) + uint(unix.XDP_RING_NEED_WAKEUP-ringNeedWakeup)
	_ = uint(optionsZeroCopy-unix.XDP_OPTIONS_ZEROCOPY) + uint(unix.XDP_OPTIONS_ZEROCOPY-optionsZeroCopy)
	_ = uint(xdpPacketHeadroom-unix.XDP_PACKET_HEADROOM) + uint(unix.XDP_PACKET_HEADROOM-xdpPacketHeadroom)
)

var (
	_ = unix.XDPDesc(Desc{})
	_ = unix.XDPRingOffset(xdpRingOffset{})
	_ = unix.XDPUmemReg(xdpUmemReg{})
	_ = unix.XDPStatistics(xdpStatistics{})

	// Four xdpRingOffsets (checked above), in order.
	_ [unsafe.Sizeof(unix.XDPMmapOffsets{})]struct{} = [unsafe.Sizeof(xdpMmapOffsets{})]struct{}{}
)
