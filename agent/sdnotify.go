package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// sdNotify sends state to the service manager, as sd_notify(3) does: one
// datagram on the AF_UNIX socket $NOTIFY_SOCKET names (a leading @ is the
// abstract namespace). Without $NOTIFY_SOCKET (not run by systemd with
// Type=notify) it does nothing.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	} else if path[0] != '/' {
		return fmt.Errorf("NOTIFY_SOCKET %q: neither a path nor an abstract socket: %w", path, fi.EINVAL)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify the service manager: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify the service manager: %w", err)
	}
	return nil
}

// notifyReady tells systemd (Type=notify) that the agent is ready: the
// program is attached and the control socket listens.
func (a *Agent) notifyReady() {
	ifaces := make([]string, 0, len(a.cfg.Ifaces))
	for _, att := range a.attachments() {
		ifaces = append(ifaces, att.Ifname)
	}
	status := fmt.Sprintf("STATUS=attached to %s, serving %s", strings.Join(ifaces, ","), a.cfg.Socket)
	if err := sdNotify("READY=1\n" + status + "\nMAINPID=" + strconv.Itoa(os.Getpid())); err != nil {
		a.log.Warn("systemd notification", "err", err)
	}
}

// watchdogInterval is how often to ping systemd's watchdog: half of
// $WATCHDOG_USEC, as sd_watchdog_enabled(3) advises, or 0 when the unit
// asks for no watchdog (or asks it of another process: $WATCHDOG_PID).
func watchdogInterval() (time.Duration, error) {
	s := os.Getenv("WATCHDOG_USEC")
	if s == "" {
		return 0, nil
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(os.Getpid()) {
		return 0, nil
	}
	usec, err := strconv.ParseUint(s, 10, 63)
	if err != nil || usec == 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC %q: want a positive number of microseconds: %w", s, fi.EINVAL)
	}
	return time.Duration(usec) * time.Microsecond / 2, nil
}

// watchdog sends WATCHDOG=1 every half watchdog period until ctx ends,
// each time the agent is healthy: a hung agent (or one whose maps went
// away) stops pinging and systemd restarts it.
func (a *Agent) watchdog(ctx context.Context) {
	every, err := watchdogInterval()
	if err != nil {
		a.log.Warn("systemd watchdog", "err", err)
		return
	}
	if every == 0 {
		return
	}
	a.log.Info("systemd watchdog", "interval", every.String())
	t := time.NewTicker(every)
	defer t.Stop()
	var h health
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.healthy(every, &h); err != nil {
				a.log.Warn("not pinging the systemd watchdog", "err", err)
				continue
			}
			if err := sdNotify("WATCHDOG=1"); err != nil {
				a.log.Warn("systemd watchdog", "err", err)
			}
		}
	}
}

// health is what healthy keeps from one check to the next.
type health struct {
	// The writers' lock's progress at the last check (loader.LockProgress).
	waiters int
	taken   uint64
	// probe is a goroutine's wait for the agent's own lock, started by the
	// last check; it must have ended by this one.
	probe chan struct{}
}

// healthy checks that the agent can still read its dataplane and still
// gets its locks, every interval: the dataplane's (callers waited for it
// at the last check and now, and no one took it in between: a process
// holding the writers' lock hangs, or the agent itself) and the agent's
// own, which admitting a connection takes. That one is probed without
// waiting, so as not to delay the ping.
func (a *Agent) healthy(interval time.Duration, h *health) error {
	if _, err := a.dp.Counters(); err != nil {
		return fmt.Errorf("read the XDP counters: %w", err)
	}
	waiters, other, taken := a.dp.LockProgress()
	stuck := waiters > 0 && h.waiters > 0 && taken == h.taken
	h.waiters, h.taken = waiters, taken
	switch {
	case stuck && other:
		// Another process holds the writers' lock: a new agent would
		// wait for it as well. Say so, and keep serving what needs no
		// change to the maps.
		a.log.Warn("changes to the maps wait for the writers' lock, which another process holds (a process of the agent's user or root that hangs: find it with lsof)",
			"lock", loader.LockPath(a.cfg.PinRoot), "waited_over", interval.String())
	case stuck:
		return fmt.Errorf("changes to the maps have waited over %v for the agent's own hold of the writers' lock %s: %w",
			interval, loader.LockPath(a.cfg.PinRoot), fi.ETIMEDOUT)
	}
	if p := h.probe; p != nil {
		select {
		case <-p:
		default:
			if other {
				// Its holder waits for the writers' lock another
				// process holds (creating an AV takes both).
				return nil
			}
			return fmt.Errorf("the agent's state has been locked for over %v: %w", interval, fi.ETIMEDOUT)
		}
	}
	done := make(chan struct{})
	go func() {
		a.mu.Lock()
		close(done)
		a.mu.Unlock()
	}()
	h.probe = done
	return nil
}
