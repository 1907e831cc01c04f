//go:build linux

package av_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// A reader of a named AV through the agent's descriptors reads a copy of
// its table. Before, a lock-free hit answered from the copy whatever had
// changed since: after the owner removed a peer and gave its index to
// another, the reader still attributed the old peer's datagrams to the
// index and sent to the old peer, on every call. Now the copy answers only
// while the AV's change stamp has not moved; the next call after a change
// re-reads the table. Without a stamp page (a reader of the pins), every
// call asks the kernel whether the AV changed.
func TestCopyReaderSeesChanges(t *testing.T) {
	for _, withStamps := range []bool{true, false} {
		dp, _ := pinnedDP(t)
		var stamps *loader.StampPage
		if withStamps {
			var err error
			if stamps, err = loader.NewStampPage(int(dp.Config().MaxAVs)); err != nil {
				t.Fatal(err)
			}
			dp.SetStampPage(stamps)
		}
		w := openAV(t, dp, av.Attr{Name: "copied", Flags: fi.AVUserID})
		if _, err := w.Insert(peers(0, 3), nil, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.SetUserID(1, 111, 0); err != nil {
			t.Fatal(err)
		}
		r := openAV(t, handedDP(t, dp, stamps), av.Attr{Name: "copied", Flags: fi.Read})
		if s, ok := r.SourceOf(peer(1)); !ok || s.FiAddr != 1 || s.UserID != 111 {
			t.Fatalf("stamps %v, before: %+v %v", withStamps, s, ok)
		}
		if err := w.Remove([]fi.Addr{1}, 0); err != nil {
			t.Fatal(err)
		}
		fa := make([]fi.Addr, 1)
		if _, err := w.Insert(peers(50, 1), fa, 0, nil); err != nil || fa[0] != 1 {
			t.Fatalf("reinsert: %v %v", fa, err)
		}
		if err := w.SetUserID(1, 222, 0); err != nil {
			t.Fatal(err)
		}
		if s, ok := r.SourceOf(peer(1)); ok {
			t.Errorf("stamps %v: the removed peer is still fi_addr %d (user ID %d)", withStamps, s.FiAddr, s.UserID)
		}
		if ap, ok := r.Resolve(1); !ok || ap != peer(50) {
			t.Errorf("stamps %v: fi_addr 1 resolves to %v %v, want %v", withStamps, ap, ok, peer(50))
		}
		if s, ok := r.SourceOf(peer(50)); !ok || s.FiAddr != 1 || s.UserID != 222 {
			t.Errorf("stamps %v: the new peer: %+v %v", withStamps, s, ok)
		}
		if ap, err := r.LookupAddr(1); err != nil || ap != peer(50) {
			t.Errorf("stamps %v: lookup of fi_addr 1: %v %v, want %v", withStamps, ap, err, peer(50))
		}
	}
}

// An AV destroyed and made again under its name lands in the same slot;
// its generations go on from the old one's (both used to start at 1, so a
// reader of the old one, a copy without stamps, could see the new one's
// generation equal to the one it read and keep its copy; this test does not
// reach that coincidence, it checks that the reader follows the new AV).
func TestRecreatedAVIsNotTheOld(t *testing.T) {
	dp, _ := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "again"})
	if _, err := w.Insert(peers(0, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, handedDP(t, dp, nil), av.Attr{Name: "again", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("before: %v %v", ap, ok)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := av.Destroy(dp, "again"); err != nil {
		t.Fatal(err)
	}
	w2 := openAV(t, dp, av.Attr{Name: "again"})
	if w2.ID() != w.ID() {
		t.Skipf("made again in slot %d, not %d", w2.ID(), w.ID())
	}
	if _, err := w2.Insert(peers(40, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if ap, ok := r.Resolve(1); ok && ap != peer(41) {
		t.Errorf("the reader of the old AV resolves fi_addr 1 to %v, the new AV's is %v", ap, peer(41))
	}
}

// The agent that handed out the stamp page stops (a restart): it marks
// its page dead, and its clients' copies no longer answer because of it;
// a change made after (by the next agent, or a root process) is seen at
// the next lookup, through the kernel's generation.
func TestCopyReaderAfterAgentStops(t *testing.T) {
	dp, _ := pinnedDP(t)
	stamps, err := loader.NewStampPage(int(dp.Config().MaxAVs))
	if err != nil {
		t.Fatal(err)
	}
	dp.SetStampPage(stamps)
	w := openAV(t, dp, av.Attr{Name: "orphan"})
	if _, err := w.Insert(peers(0, 3), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, handedDP(t, dp, stamps), av.Attr{Name: "orphan", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("before: %v %v", ap, ok)
	}
	stamps.Close() // the agent stops
	if err := w.Remove([]fi.Addr{1}, 0); err != nil {
		t.Fatal(err)
	}
	fa := make([]fi.Addr, 1)
	if _, err := w.Insert(peers(50, 1), fa, 0, nil); err != nil || fa[0] != 1 {
		t.Fatalf("reinsert: %v %v", fa, err)
	}
	if ap, ok := r.Resolve(1); !ok || ap != peer(50) {
		t.Errorf("after the agent stopped: fi_addr 1 resolves to %v %v, want %v", ap, ok, peer(50))
	}
}

// A copy without a stamp page asks the kernel for the AV's generation at
// each lookup, and re-reads the table only when it moved: a first version
// re-read the whole table (and rebuilt the free list) at every call,
// hundreds of kilobytes allocated per Resolve.
func TestCopyReaderWithoutStampsDoesNotReload(t *testing.T) {
	dp, _ := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "plain"})
	if _, err := w.Insert(peers(0, 4000), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, handedDP(t, dp, nil), av.Attr{Name: "plain", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("resolve: %v %v", ap, ok)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range 50 {
		r.Resolve(1)
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / 50; per > 4096 {
		t.Errorf("%d bytes allocated per Resolve: the copy is re-read at every call", per)
	}
}

// TestStampAgentChild is the agent of TestCopyReaderAfterAgentKilled: it
// makes a stamp page, sends its descriptors (as maps.open would) over the
// socket it was given, and waits to be killed. It does nothing unless
// started by that test.
func TestStampAgentChild(t *testing.T) {
	if os.Getenv("XDPFAB_TEST_STAMP_CHILD") == "" {
		t.Skip("helper process for TestCopyReaderAfterAgentKilled")
	}
	n, _ := strconv.Atoi(os.Getenv("XDPFAB_TEST_STAMP_CHILD"))
	p, err := loader.NewStampPage(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(3, []byte{1}, unix.UnixRights(p.FD(), p.LifeFD()), nil, 0); err != nil {
		t.Fatal(err)
	}
	select {} // until killed
}

// An agent that is killed (no Close: its page is never marked dead) leaves
// nobody to move its stamps. Before, its clients' copies of AV tables kept
// answering from the stamps they had, for as long as they did not fetch
// descriptors again: after the owner (a root process with the library, or
// the next agent) removed a peer and gave its index to another, the reader
// still resolved the index to the old peer. Now the client holds a pidfd
// of the agent (the page's life line), sees it readable when the agent's
// process ends, and replaces its view of the page by a dead one, whatever
// another client does with its copy of the line.
func TestCopyReaderAfterAgentKilled(t *testing.T) {
	dp, _ := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "crash"})
	if _, err := w.Insert(peers(0, 3), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(sp[0]), "parent"), os.NewFile(uintptr(sp[1]), "child")
	defer mine.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStampAgentChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XDPFAB_TEST_STAMP_CHILD="+strconv.Itoa(int(dp.Config().MaxAVs)))
	cmd.ExtraFiles = []*os.File{theirs}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
		}
		cmd.Wait()
	})
	go func() { // the child's output, for a failure
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			t.Log("child:", sc.Text())
		}
	}()
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(8))
	_, oobn, _, _, err := unix.Recvmsg(sp[0], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages: %v %v", msgs, err)
	}
	stampFDs, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(stampFDs) != 2 {
		t.Fatalf("descriptors: %v %v", stampFDs, err)
	}
	// What another client of the agent can do with the life line it got
	// too: reopen it for writing and keep that open (a pipe's read end
	// gave a write end that kept the line alive for everyone), and clear
	// O_NONBLOCK on the open file all clients share.
	if w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", stampFDs[1]), os.O_WRONLY, 0); err == nil {
		defer w.Close()
	}
	hostile, err := unix.Dup(stampFDs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hostile)
	maps, err := dp.ReadOnlyFDs()
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, m := range maps {
		fd, err := unix.Dup(m.FD())
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	h, err := loader.FromFDs(append(fds, stampFDs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r := openAV(t, h, av.Attr{Name: "crash", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("before: %v %v", ap, ok)
	}
	if err := unix.SetNonblock(hostile, false); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil { // kill -9: no Close
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	if err := w.Remove([]fi.Addr{1}, 0); err != nil {
		t.Fatal(err)
	}
	fa := make([]fi.Addr, 1)
	if _, err := w.Insert(peers(50, 1), fa, 0, nil); err != nil || fa[0] != 1 {
		t.Fatalf("reinsert: %v %v", fa, err)
	}
	// The watcher runs on its own goroutine: give it a moment.
	var ap any
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		got, ok := r.Resolve(1)
		if ok && got == peer(50) {
			return
		}
		ap = got
	}
	t.Errorf("after the agent was killed: fi_addr 1 resolves to %v, want %v", ap, peer(50))
}
