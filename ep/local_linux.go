//go:build linux

package ep

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// A wildcard endpoint (0.0.0.0 or ::) receives only datagrams to the
// host's own unicast addresses: the XDP program looks the destination up
// in the dataplane's local-address table (loader.Objects.PutLocalAddr),
// which a localWatch keeps in step with the kernel's addresses of one
// network namespace for as long as a wildcard endpoint of that namespace
// is registered in this process. It subscribes to the kernel's address
// changes and, on each, reads the namespace's addresses again: it adds
// those that appeared and removes those it added that are gone. Entries
// stay when the last wildcard endpoint closes (another process's wildcard
// endpoint may be using them; an address that is not the host's any more
// only matters if a frame to it still arrives here).
type localWatch struct {
	key    localWatchKey
	dp     *loader.Objects
	h      *netlink.Handle // in the watched namespace
	done   chan struct{}
	exited chan struct{}
	refs   int // under localMu

	mu   sync.Mutex
	mine map[netip.Addr]bool // addresses this watch put in the table
}

type localWatchKey struct {
	dp    *loader.Objects
	netns uint64
}

var (
	localMu      sync.Mutex
	localWatches = map[localWatchKey]*localWatch{}
)

// watchLocal makes sure dp's local-address table holds the addresses of
// the calling thread's network namespace, now and until release is
// called. Call it on a thread in the endpoint's namespace.
func watchLocal(dp *loader.Objects) (release func(), err error) {
	ns, err := dataplane.ThreadNetns()
	if err != nil {
		return nil, fmt.Errorf("local addresses: %w", err)
	}
	key := localWatchKey{dp, ns}
	localMu.Lock()
	defer localMu.Unlock()
	w := localWatches[key]
	if w == nil {
		if w, err = startLocalWatch(key); err != nil {
			return nil, fmt.Errorf("local addresses: %w", err)
		}
		localWatches[key] = w
	}
	w.refs++
	var once sync.Once
	return func() { once.Do(w.release) }, nil
}

func startLocalWatch(key localWatchKey) (*localWatch, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	w := &localWatch{key: key, dp: key.dp, h: h, done: make(chan struct{}), exited: make(chan struct{}), mine: map[netip.Addr]bool{}}
	// Subscribe before the first read, so that no change falls between.
	ch := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(ch, w.done, netlink.AddrSubscribeOptions{
		ErrorCallback: func(error) {}, ReceiveBufferSize: 1 << 20,
	}); err != nil {
		h.Close()
		return nil, fmt.Errorf("subscribe to address changes: %w", err)
	}
	if err := w.sync(); err != nil {
		close(w.done)
		h.Close()
		return nil, err
	}
	go w.run(ch)
	return w, nil
}

// run resynchronises on every change until the subscription ends. One
// that ends on its own (the kernel overran its buffer) takes the watch out
// of the registry, so that the next wildcard endpoint starts a new one.
func (w *localWatch) run(ch <-chan netlink.AddrUpdate) {
	defer close(w.exited)
	for range ch {
		for len(ch) > 0 { // one read for a burst of changes
			<-ch
		}
		w.sync()
	}
	localMu.Lock()
	if localWatches[w.key] == w {
		delete(localWatches, w.key)
	}
	localMu.Unlock()
}

// sync makes the table hold the namespace's current unicast addresses.
func (w *localWatch) sync() error {
	addrs, err := w.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := map[netip.Addr]int{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		if ip = ip.Unmap(); ip.IsLoopback() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		now[ip] = a.LinkIndex
	}
	var errs []error
	for ip, ifindex := range now {
		if err := w.dp.PutLocalAddr(ip, ifindex); err != nil {
			errs = append(errs, err)
			continue
		}
		w.mine[ip] = true
	}
	for ip := range w.mine {
		if _, ok := now[ip]; !ok {
			if err := w.dp.DeleteLocalAddr(ip); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(w.mine, ip)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func (w *localWatch) release() {
	localMu.Lock()
	w.refs--
	last := w.refs == 0
	if last && localWatches[w.key] == w {
		delete(localWatches, w.key)
	}
	localMu.Unlock()
	if !last {
		return
	}
	close(w.done)
	<-w.exited
	w.h.Close()
}
