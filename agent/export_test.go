package agent

import (
	"context"
	"net/netip"
	"time"
)

// SetRefuseRights makes the agents started from now on ask the kernel to
// refuse the descriptors clients send (SO_PASSRIGHTS), or not, as on a
// kernel without it; it returns the previous setting.
func SetRefuseRights(on bool) bool {
	was := askRefusal
	askRefusal = on
	return was
}

// StraysPending is how many descriptors clients sent wait to be closed or
// are being closed.
func StraysPending() int {
	queued, workers := strays.pending()
	return queued + workers
}

// SetLookupHost makes av insertsym resolve host names with fn, and bounds
// a request's resolution by timeout (0: as it is); the returned function
// restores both.
func SetLookupHost(fn func(ctx context.Context, host string) ([]netip.Addr, error), timeout time.Duration) (restore func()) {
	was, wasTimeout := lookupHost, resolveTimeout
	lookupHost = fn
	if timeout > 0 {
		resolveTimeout = timeout
	}
	return func() { lookupHost, resolveTimeout = was, wasTimeout }
}

// SetReplyTimeout shortens (or lengthens) how long a reply may wait for
// room in a client's socket; the returned function restores it.
func SetReplyTimeout(d time.Duration) (restore func()) {
	was := replyTimeoutNs.Swap(int64(d))
	return func() { replyTimeoutNs.Store(was) }
}
