package neigh

// The rtnetlink values the resolver's logic reads (linux/neighbour.h,
// linux/rtnetlink.h), defined here so that the package builds on every
// system; uapi_linux.go checks them against golang.org/x/sys/unix.

// Neighbour states (NUD_*).
const (
	nudIncomplete = 0x01
	nudReachable  = 0x02
	nudStale      = 0x04
	nudDelay      = 0x08
	nudProbe      = 0x10
	nudFailed     = 0x20
	nudNoARP      = 0x40
	nudPermanent  = 0x80
)

// Neighbour states the resolver distinguishes.
const (
	// nudUsable states carry a link-layer address the kernel itself would
	// transmit to. STALE and DELAY are included: the kernel sends through
	// them while it re-verifies the neighbour.
	nudUsable = nudReachable | nudStale | nudDelay | nudProbe |
		nudPermanent | nudNoARP
	// nudNoUse are states NTF_USE must never touch: on Linux 6.x an
	// NTF_USE request turns a PERMANENT entry into INCOMPLETE (measured on
	// 6.18), silently destroying a static ARP/NDP entry.
	nudNoUse = nudPermanent | nudNoARP
)

// Route types (RTN_*) and the table of a route the kernel made up.
const (
	rtnUnicast    = 1
	rtnLocal      = 2
	rtnBroadcast  = 3
	rtnMulticast  = 5
	rtnBlackhole  = 6
	rtTableUnspec = 0
)
