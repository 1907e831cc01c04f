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
// each time the dataplane's maps still answer: a hung agent (or one whose
// maps went away) stops pinging and systemd restarts it.
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.healthy(); err != nil {
				a.log.Warn("not pinging the systemd watchdog", "err", err)
				continue
			}
			if err := sdNotify("WATCHDOG=1"); err != nil {
				a.log.Warn("systemd watchdog", "err", err)
			}
		}
	}
}

// healthy checks that the agent can still read its dataplane.
func (a *Agent) healthy() error {
	if _, err := a.dp.Counters(); err != nil {
		return fmt.Errorf("read the XDP counters: %w", err)
	}
	return nil
}
