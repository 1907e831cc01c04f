//go:build linux

package loader

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// NewStampPage makes the page for AV ids below maxAVs.
func NewStampPage(maxAVs int) (*StampPage, error) {
	size := (max(maxAVs, 1)*8 + os.Getpagesize() - 1) / os.Getpagesize() * os.Getpagesize()
	fd, err := unix.MemfdCreate(stampsName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("AV stamps: memfd: %w", err)
	}
	fail := func(what string, err error) (*StampPage, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("AV stamps: %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("size", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	// F_SEAL_FUTURE_WRITE: this mapping writes on, no later one can (nor
	// write(2)); the size is fixed; no seal comes off.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		unix.Munmap(mem)
		return fail("seal", err)
	}
	// The life line: a pidfd of this process (Linux 5.3), which pollers
	// see readable once the process has ended. Not a pipe: any holder of
	// a pipe end can reopen it for writing through /proc/self/fd and keep
	// the line alive for everyone; a pidfd has no writer, and what else it
	// allows (signals, pidfd_getfd) needs rights over the agent.
	life, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		unix.Munmap(mem)
		return fail("life line (pidfd_open)", err)
	}
	unix.CloseOnExec(life)
	return &StampPage{fd: fd, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), size/8), life: life}, nil
}

// stampMaps holds the stamp pages this process mapped, by memfd identity:
// each is mapped once and never unmapped, since lock-free readers keep
// pointers into it (a page per agent the process talks to).
var stampMaps = struct {
	sync.Mutex
	m map[[2]uint64][]uint64
	// watched: the pages (by their first word's address) whose life line
	// a goroutine waits on (watchLife); dead: those it found ended.
	watched, dead map[*uint64]bool
}{m: map[[2]uint64][]uint64{}, watched: map[*uint64]bool{}, dead: map[*uint64]bool{}}

// mapStamps maps fd read-only if it is an agent's stamp page (a memfd
// sealed as NewStampPage seals it) and closes it; ok false leaves fd open
// (not a stamp page).
func mapStamps(fd int) (words []uint64, ok bool, err error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, false, nil // not a memfd: a map
	}
	defer unix.Close(fd)
	const want = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE
	if seals&want != want {
		return nil, true, fmt.Errorf("loader: AV stamp page not sealed (seals %#x): %w", seals, fi.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, true, fmt.Errorf("loader: AV stamp page: %w", err)
	}
	if st.Size <= 0 || st.Size%8 != 0 || st.Size > 1<<20 {
		return nil, true, fmt.Errorf("loader: AV stamp page of %d bytes: %w", st.Size, fi.EINVAL)
	}
	key := [2]uint64{st.Dev, st.Ino}
	stampMaps.Lock()
	defer stampMaps.Unlock()
	if w := stampMaps.m[key]; w != nil {
		return w, true, nil
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, true, fmt.Errorf("loader: map the AV stamp page: %w", err)
	}
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	stampMaps.m[key] = w
	return w, true, nil
}

// isLifeLine reports whether fd is a pidfd (a stamp page's life line):
// pidfd_send_signal with signal 0 only checks (that this process may
// signal it: EPERM when not, ESRCH when it ended, EINVAL when the process
// is not in this process's pid namespace, as for a client in a
// container), and fails with EBADF for any other descriptor but a
// /proc/PID directory, which is not one.
func isLifeLine(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false // a /proc/PID directory passes the probe too
	}
	err := unix.PidfdSendSignal(fd, 0, nil, 0)
	return err == nil || err == unix.EPERM || err == unix.ESRCH || err == unix.EINVAL
}

// watchLife takes fd, the life line (a pidfd of the agent) of the stamp
// page mapped at words, and waits for it to become readable: the agent's
// process ended, however it ended. Then words' pages are replaced by dead
// ones (killStamps), so that copies of AV tables stop answering from
// stamps nobody moves any more. A page watched already, or dead already,
// needs no second watch: fd is closed.
//
// The wait parks a goroutine in the runtime's poller (no thread); it and
// fd last as long as the agent does, whatever this process closes (one
// per agent page the process mapped, which also stays). Should the
// descriptor not be pollable that way (its open file is shared with the
// agent's other clients, and one of them may change its flags), the
// goroutine waits in poll(2) on a thread instead.
func watchLife(fd int, words []uint64) {
	if len(words) == 0 {
		unix.Close(fd)
		return
	}
	key := &words[0]
	stampMaps.Lock()
	if stampMaps.watched[key] || stampMaps.dead[key] {
		stampMaps.Unlock()
		unix.Close(fd)
		return
	}
	stampMaps.watched[key] = true
	stampMaps.Unlock()
	go func() {
		waitExit(fd)
		stampMaps.Lock()
		defer stampMaps.Unlock()
		killStamps(words)
		delete(stampMaps.watched, key)
		stampMaps.dead[key] = true
	}()
}

// waitExit returns once pidfd fd is readable (its process ended) or
// cannot be waited on, and closes it.
func waitExit(fd int) {
	_ = unix.SetNonblock(fd, true) // os.NewFile puts non-blocking files in the poller
	f := os.NewFile(uintptr(fd), "xdpfab-agent-pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// exited polls without waiting (timeout 0) or, with wait, until the
	// process ends; an error but EINTR ends the wait too.
	exited := func(fd uintptr, wait bool) bool {
		for {
			timeout := 0
			if wait {
				timeout = -1
			}
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(p, timeout)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil || n > 0:
				return true
			case !wait:
				return false
			}
		}
	}
	if f.SetReadDeadline(time.Time{}) == nil { // in the poller
		if rc.Read(func(fd uintptr) bool { return exited(fd, false) }) == nil {
			return
		}
	}
	_ = rc.Control(func(fd uintptr) { exited(fd, true) })
}

// killStamps replaces the read-only mapping at words by private pages of
// deadStamps, in one mremap(MREMAP_FIXED): a reader sees the old page or
// the dead one, never a page in between. The dead pages are made first,
// filled, and made read-only. When that fails, the page is overwritten in
// place through a private mapping (a reader may see zeros for a moment:
// stamps of a page that no agent moves, which the copy also trusted the
// moment before).
func killStamps(words []uint64) {
	size := uintptr(len(words)) * 8
	at := unsafe.Pointer(&words[0])
	dead, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err == nil {
		fill(unsafe.Slice((*uint64)(dead), len(words)))
		_ = unix.Mprotect(unsafe.Slice((*byte)(dead), size), unix.PROT_READ)
		_, _, e := unix.Syscall6(unix.SYS_MREMAP, uintptr(dead), size, size, unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, uintptr(at), 0)
		if e == 0 {
			return
		}
		_ = unix.MunmapPtr(dead, size)
	}
	if _, err := unix.MmapPtr(-1, 0, at, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err == nil {
		fill(words)
		_ = unix.Mprotect(unsafe.Slice((*byte)(at), size), unix.PROT_READ)
	}
}

// fill stores deadStamps in every word: word 0 (AVStamp answers nil) and
// every AV's stamp (a copy that holds a pointer to one sees it moved).
func fill(words []uint64) {
	for i := range words {
		atomic.StoreUint64(&words[i], deadStamps)
	}
}
