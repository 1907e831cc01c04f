//go:build linux

package neigh

import "golang.org/x/sys/unix"

// uapi.go checked against x/sys/unix: each line compiles only if its two
// values are equal (a negative constant does not convert to uint).
const (
	_ = uint(nudIncomplete-unix.NUD_INCOMPLETE) + uint(unix.NUD_INCOMPLETE-nudIncomplete)
	_ = uint(nudReachable-unix.NUD_REACHABLE) + uint(unix.NUD_REACHABLE-nudReachable)
	_ = uint(nudStale-unix.NUD_STALE) + uint(unix.NUD_STALE-nudStale)
	_ = uint(nudDelay-unix.NUD_DELAY) + uint(unix.NUD_DELAY-nudDelay)
	_ = uint(nudProbe-unix.NUD_PROBE) + uint(unix.NUD_PROBE-nudProbe)
	_ = uint(nudFailed-unix.NUD_FAILED) + uint(unix.NUD_FAILED-nudFailed)
	_ = uint(nudNoARP-unix.NUD_NOARP) + uint(unix.NUD_NOARP-nudNoARP)
	_ = uint(nudPermanent-unix.NUD_PERMANENT) + uint(unix.NUD_PERMANENT-nudPermanent)

	_ = uint(rtnUnicast-unix.RTN_UNICAST) + uint(unix.RTN_UNICAST-rtnUnicast)
	_ = uint(rtnLocal-unix.RTN_LOCAL) + uint(unix.RTN_LOCAL-rtnLocal)
	_ = uint(rtnBroadcast-unix.RTN_BROADCAST) + uint(unix.RTN_BROADCAST-rtnBroadcast)
	_ = uint(rtnMulticast-unix.RTN_MULTICAST) + uint(unix.RTN_MULTICAST-rtnMulticast)
	_ = uint(rtnBlackhole-unix.RTN_BLACKHOLE) + uint(unix.RTN_BLACKHOLE-rtnBlackhole)
	_ = uint(rtTableUnspec-unix.RT_TABLE_UNSPEC) + uint(unix.RT_TABLE_UNSPEC-rtTableUnspec)
)
