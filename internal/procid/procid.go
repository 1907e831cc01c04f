// Package procid names a process so that a reused pid is never mistaken
// for it: the pid together with the process's start time (field 22 of
// /proc/PID/stat, in clock ticks since boot), which the kernel never
// repeats for another process of the same pid within one boot.
//
// xdpfab records an ID with what a process holds in the shared maps
// (endpoints, anonymous AVs, reserved capacity) so the agent can reclaim
// them once the process is gone, whoever opened them.
package procid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ID is a process's identity: pid and start time. The zero ID names no
// process.
type ID struct {
	PID   uint32
	Start uint64 // clock ticks after boot; 0 if it could not be read
}

// Self is the calling process's ID.
func Self() ID {
	id, _ := Of(os.Getpid())
	return id
}

// Of reads pid's ID. It fails with an error wrapping os.ErrNotExist when
// no such process exists, and with another error when /proc cannot tell
// (hidepid, a foreign pid namespace).
func Of(pid int) (ID, error) {
	if pid <= 0 || pid > 1<<22 {
		return ID{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ID{PID: uint32(pid)}, err
	}
	start, err := parseStart(b)
	if err != nil {
		return ID{PID: uint32(pid)}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ID{PID: uint32(pid), Start: start}, nil
}

// parseStart reads field 22 (starttime) of a /proc/PID/stat line. The
// command name (field 2) is in parentheses and may itself contain spaces
// and parentheses, so the fields are counted after its last ')'.
func parseStart(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0, errors.New("stat: too few fields")
	}
	return strconv.ParseUint(string(fields[19]), 10, 64)
}

// Alive reports whether the process id names is still running: a process
// with id.PID exists and, where its start time can be read, started when id
// says. When /proc cannot tell, a process that exists counts as alive:
// reclaiming from a live process would be worse than keeping a dead one's.
func (id ID) Alive() bool {
	if id.PID == 0 {
		return false
	}
	if err := syscall.Kill(int(id.PID), 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false // ESRCH: no such process
	}
	now, err := Of(int(id.PID))
	if err != nil || id.Start == 0 || now.Start == 0 {
		return !errors.Is(err, os.ErrNotExist)
	}
	return now.Start == id.Start
}

func (id ID) String() string { return fmt.Sprintf("pid %d (start %d)", id.PID, id.Start) }
