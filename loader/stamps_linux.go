//go:build linux

package loader

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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
	var life [2]int
	if err := unix.Pipe2(life[:], unix.O_CLOEXEC); err != nil {
		unix.Munmap(mem)
		return fail("life line", err)
	}
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

// isPipe reports whether fd is a pipe (a stamp page's life line).
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// watchLife takes fd, the read end of the life line of the stamp page
// mapped at words, and waits (a goroutine parked in the runtime's poller,
// no thread) for its end of file: the agent's process ended. Then words'
// pages are replaced by dead ones (killStamps), so that copies of AV
// tables stop answering from stamps nobody moves any more. A page watched
// already, or dead already, needs no second watch: fd is closed.
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
	if err := unix.SetNonblock(fd, true); err != nil {
		stampMaps.Unlock()
		unix.Close(fd)
		return
	}
	stampMaps.watched[key] = true
	stampMaps.Unlock()
	f := os.NewFile(uintptr(fd), "xdpfab-agent-life")
	go func() {
		var b [64]byte
		for {
			// Nobody writes: a read returns at end of file, or with
			// an error when the descriptor is not a pipe end one can
			// wait on; either way the line is gone.
			if n, err := f.Read(b[:]); n == 0 || err != nil {
				break
			}
		}
		f.Close()
		stampMaps.Lock()
		defer stampMaps.Unlock()
		killStamps(words)
		delete(stampMaps.watched, key)
		stampMaps.dead[key] = true
	}()
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
