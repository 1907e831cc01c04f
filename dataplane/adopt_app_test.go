//go:build linux

package dataplane_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"golang.org/x/sys/unix"
)

// The handover test runs the application side in a child process: this test
// binary, re-executed as uid/gid 65534 without capabilities, running only
// TestHelperAdoptedApp with appEnv set. It inherits the UMEM's memfd and the
// sockets as fds 3, 4, ... (cmd.ExtraFiles: new references to the same open
// files, as SCM_RIGHTS gives), talks to the parent with "app <json>" lines
// on stdout and a "go" line on stdin.
const appEnv = "XDPFAB_TEST_ADOPTED_APP"

// appParams is what the parent tells the child, as JSON in appEnv.
type appParams struct {
	Memfd   int
	UMEM    dataplane.UMEMConfig
	Sockets []appSocket
	// Frames the child expects on socket 0 (live frames) and socket 1
	// (UDP through the veth), to RxPort, with metadata naming Ifindex.
	Live, UDP []string
	RxPort    uint16
	Ifindex   int
	// Frames the child sends through each socket, from Src to Dst.
	TX       int
	Src, Dst netip.AddrPort
	SrcMAC   string
	DstMAC   string
}

type appSocket struct {
	FD   int
	Info dataplane.SocketInfo
}

// appReport is what the child tells the parent after each phase.
type appReport struct {
	Phase string
	// Status holds lines of the child's /proc/self/status (ids,
	// capabilities, locked and pinned memory).
	Status map[string]string
	// MemlockLimit is the child's RLIMIT_MEMLOCK (it sets it to 0 first).
	MemlockLimit uint64
	// Denied maps privileged operations the child tried to their errors.
	Denied map[string]string
	// Done lists what the child did without a capability.
	Done     []string
	ZeroCopy []bool
	FillFree []int
	Live     []string
	UDP      []string
	Stats    []dataplane.Stats
	// Descriptor and mapping counts before adopting and after closing,
	// and whether the inherited fds are still open after closing.
	FDs, Rings, Memfds [2]int
	HandedOpen         []bool
}

// TestAdoptedByUnprivilegedProcess hands a shared UMEM and two sockets of
// one queue to a process without privileges, which receives and transmits
// through them while the agent keeps its own descriptors.
func TestAdoptedByUnprivilegedProcess(t *testing.T) {
	testutil.RequirePrivileged(t)
	exe := unprivilegedTestBinary(t)
	bed := testbed.New(t, testbed.Options{StaticNeighbors: true})
	p := newRedirectProg(t)
	testbed.AttachXDP(t, bed.B, p.prog)
	dst := netip.AddrPortFrom(bed.A.IPv4, 5003)
	pc, err := bed.A.ListenPacket("udp4", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	rings0, memfds0 := xskMappings(t)

	// The agent: a shared UMEM, registered by its first socket, and two
	// sockets on queue 0 (the second binds with XDP_SHARED_UMEM).
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 512, FillSize: 256, CompSize: 256, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var s1, s2 *dataplane.Socket
	if err := bed.B.Do(func() (err error) {
		cfg := dataplane.SocketConfig{RxSize: 256, TxSize: 64, Logger: testLogger(t)}
		if s1, err = dataplane.Open(bed.B.Ifindex, 0, u, cfg); err != nil {
			return err
		}
		s2, err = dataplane.Open(bed.B.Ifindex, 0, u, cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	p.insert(t, s1)
	inos := []uint64{inode(t, s1.FD()), inode(t, s2.FD())}

	const n = 20
	par := appParams{
		Memfd:   3,
		UMEM:    s1.Info().UMEM,
		Sockets: []appSocket{{4, s1.Info()}, {5, s2.Info()}},
		RxPort:  4791,
		Ifindex: bed.B.Ifindex,
		TX:      n,
		Src:     netip.AddrPortFrom(bed.B.IPv4, 6000),
		Dst:     dst,
		SrcMAC:  bed.B.MAC.String(),
		DstMAC:  bed.A.MAC.String(),
	}
	for i := range n {
		par.Live = append(par.Live, fmt.Sprintf("live %02d", i))
		par.UDP = append(par.UDP, fmt.Sprintf("udp %02d", i))
	}
	app := startApp(t, exe, par, u.Memfd(), s1.FD(), s2.FD())

	rep := app.expect("ready")
	t.Logf("child: %v, memlock limit %d; denied: %v", rep.Status, rep.MemlockLimit, rep.Denied)
	for _, k := range []string{"Uid", "Gid"} {
		if f := strings.Fields(rep.Status[k]); len(f) != 4 || slices.ContainsFunc(f, func(id string) bool { return id != "65534" }) {
			t.Errorf("child %s: %q, want 65534 throughout", k, rep.Status[k])
		}
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if rep.Status[k] != "0000000000000000" {
			t.Errorf("child %s = %q, want none", k, rep.Status[k])
		}
	}
	if rep.Status["Groups"] != "" || rep.MemlockLimit != 0 {
		t.Errorf("child groups %q, memlock limit %d", rep.Status["Groups"], rep.MemlockLimit)
	}
	if !slices.Equal(rep.FillFree, []int{256, 0}) {
		t.Errorf("FillFree on the adopted sockets = %v, want [256 0]: one fill ring for the queue", rep.FillFree)
	}
	if want := []bool{s1.ZeroCopy(), s2.ZeroCopy()}; !slices.Equal(rep.ZeroCopy, want) {
		t.Errorf("adopted zero-copy %v, want %v", rep.ZeroCopy, want)
	}

	// Live frames to the first socket, then real UDP from A to the second.
	for _, l := range par.Live {
		f := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1234), netip.AddrPortFrom(bed.B.IPv4, par.RxPort), []byte(l))
		if err := p.inject(bed.B, f, 1); err != nil {
			t.Fatal(err)
		}
	}
	p.insert(t, s2)
	c, err := bed.A.Dial("udp4", netip.AddrPortFrom(bed.B.IPv4, par.RxPort).String())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range par.UDP {
		if _, err := io.WriteString(c, l); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	peer := make(chan []string, 1)
	go func() { peer <- readDatagrams(pc, 2*n, 10*time.Second) }()
	app.send("go")

	rep = app.expect("done")
	t.Logf("child did, unprivileged: %s", strings.Join(rep.Done, "; "))
	t.Logf("child stats: %+v", rep.Stats)
	if !slices.Equal(rep.Live, par.Live) || !slices.Equal(rep.UDP, par.UDP) {
		t.Errorf("child received live %q, udp %q", rep.Live, rep.UDP)
	}
	got := <-peer
	var want []string
	for _, sock := range []string{"s1", "s2"} {
		for i := range n {
			want = append(want, fmt.Sprintf("tx %s %02d", sock, i))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("peer received %d datagrams %q, want %q", len(got), got, want)
	}
	// (RxDropped may count a stray packet from A that came before the
	// child filled the ring: the program redirects everything.)
	if len(rep.Stats) != 2 || rep.Stats[1].TxInvalidDescs != 1 || rep.Stats[0].TxInvalidDescs != 0 {
		t.Errorf("child stats %+v", rep.Stats)
	}

	rep = app.expect("closed")
	app.wait()
	t.Logf("child fds %v, ring mappings %v, memfd mappings %v (before adopting, after closing)", rep.FDs, rep.Rings, rep.Memfds)
	if rep.FDs[1] != rep.FDs[0]-3 || rep.Rings != [2]int{0, 0} || rep.Memfds != [2]int{0, 0} || slices.Contains(rep.HandedOpen, true) {
		t.Errorf("child after Close: fds %v, ring mappings %v, memfd mappings %v, inherited fds open %v",
			rep.FDs, rep.Rings, rep.Memfds, rep.HandedOpen)
	}

	// The agent's descriptors name the same kernel sockets: the child's
	// invalid descriptor shows in the agent's statistics.
	if st, err := s2.Stats(); err != nil || st.TxInvalidDescs != 1 {
		t.Errorf("agent's view of the second socket: %+v, %v", st, err)
	}
	// Its mappings are untouched: RX, TX, fill and completion of the
	// first socket, RX and TX of the second, and the UMEM.
	if rings, memfds := xskMappings(t); rings != rings0+6 || memfds != memfds0+1 {
		t.Errorf("agent mappings while its sockets are open: %d rings, %d memfds; want 6 and 1", rings-rings0, memfds-memfds0)
	}
	if err := p.xsks.Delete(uint32(0)); err != nil {
		t.Fatal(err)
	}
	for _, x := range []interface{ Close() error }{s1, s2, u} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rings1, memfds1 := xskMappings(t)
	if fds := xskFDs(t, inos...); len(fds) > 0 || rings1 != rings0 || memfds1 != memfds0 {
		t.Errorf("agent after Close: descriptors %q, ring mappings %d -> %d, memfd mappings %d -> %d", fds, rings0, rings1, memfds0, memfds1)
	}
	requireQueueFree(t, bed.B)
}

// TestHelperAdoptedApp is the application side of
// TestAdoptedByUnprivilegedProcess; it does nothing unless appEnv is set.
func TestHelperAdoptedApp(t *testing.T) {
	env := os.Getenv(appEnv)
	if env == "" {
		return
	}
	var par appParams
	if err := json.Unmarshal([]byte(env), &par); err != nil {
		t.Fatal(err)
	}
	rep := appReport{Denied: map[string]string{}}
	emit := func(phase string) {
		rep.Phase = phase
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("app %s\n", b)
	}
	did := func(format string, args ...any) { rep.Done = append(rep.Done, fmt.Sprintf(format, args...)) }

	// Nothing may need locked memory: lower the limit to 0 first.
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{}); err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	rep.MemlockLimit = lim.Cur
	rep.FDs[0], _ = counts(t)
	rep.Rings[0], rep.Memfds[0] = xskMappings(t)

	u, err := dataplane.AttachUMEM(par.Memfd, par.UMEM)
	if err != nil {
		t.Fatal(err)
	}
	did("AttachUMEM (mmap MAP_SHARED of the memfd, %d bytes)", par.UMEM.FrameSize*par.UMEM.NumFrames)
	// Adopt in reverse order: the fill and completion rings are mapped
	// through whichever socket of the queue comes first.
	socks := make([]*dataplane.Socket, len(par.Sockets))
	for i := len(socks) - 1; i >= 0; i-- {
		ps := par.Sockets[i]
		if socks[i], err = dataplane.AdoptSocket(ps.FD, ps.Info.Ifindex, ps.Info.Queue, u, ps.Info.Socket); err != nil {
			t.Fatal(err)
		}
		rep.ZeroCopy = append([]bool{socks[i].ZeroCopy()}, rep.ZeroCopy...)
	}
	did("AdoptSocket x%d (getsockopt SO_DOMAIN, XDP_MMAP_OFFSETS, XDP_OPTIONS, SO_BUSY_POLL; recvfrom; mmap of RX, TX, fill and completion rings)", len(socks))
	rep.Status = procStatus(t, "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "VmLck", "VmPin")

	// What the child cannot do, for the record.
	if fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		rep.Denied["socket(AF_XDP)"] = "allowed"
	} else {
		rep.Denied["socket(AF_XDP)"] = err.Error()
	}
	if fd, err := unix.IoctlRetInt(socks[0].FD(), unix.SIOCGSKNS); err == nil {
		unix.Close(fd)
		rep.Denied["SIOCGSKNS"] = "allowed"
	} else {
		rep.Denied["SIOCGSKNS"] = err.Error()
	}
	rep.Denied["ftruncate(memfd)"] = fmt.Sprint(unix.Ftruncate(u.Memfd(), 0))
	rep.Denied["setsockopt(XDP_RX_RING) on a bound socket"] = fmt.Sprint(unix.SetsockoptInt(socks[0].FD(), unix.SOL_XDP, unix.XDP_RX_RING, 512))

	for _, s := range socks {
		rep.FillFree = append(rep.FillFree, s.FillFree())
	}
	did("FillFree")
	emit("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		t.Fatalf("parent said %q, %v", in.Text(), in.Err())
	}

	for _, got := range []struct {
		into *[]string
		want []string
		s    *dataplane.Socket
	}{{&rep.Live, par.Live, socks[0]}, {&rep.UDP, par.UDP, socks[1]}} {
		for _, p := range receiveN(t, got.s, len(got.want), par.RxPort, par.Ifindex, 5*time.Second) {
			*got.into = append(*got.into, string(p))
		}
	}
	did("Receive, Poll, Meta, Free, FillFree (%d live frames on one socket, %d UDP datagrams on the other)", len(rep.Live), len(rep.UDP))

	srcMAC, err := net.ParseMAC(par.SrcMAC)
	if err != nil {
		t.Fatal(err)
	}
	dstMAC, err := net.ParseMAC(par.DstMAC)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range socks {
		frames := make([][]byte, par.TX)
		for j := range frames {
			frames[j] = udp4Frame(srcMAC, dstMAC, par.Src, par.Dst, fmt.Appendf(nil, "tx s%d %02d", i+1, j))
		}
		sendFrames(t, s, frames)
	}
	did("Alloc, Transmit, Kick (sendto), CompleteFree (%d frames through each socket)", par.TX)
	// A descriptor outside the UMEM, to see it in the statistics.
	socks[1].Transmit([]dataplane.Desc{{Addr: 1 << 40, Len: 60}})
	if err := socks[1].Kick(); err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		rep.Stats = append(rep.Stats, st)
	}
	did("Stats (getsockopt XDP_STATISTICS)")
	emit("done")

	for _, s := range socks {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	rep.FDs[1], _ = counts(t)
	rep.Rings[1], rep.Memfds[1] = xskMappings(t)
	rep.HandedOpen = []bool{fdOpen(par.Memfd)}
	for _, ps := range par.Sockets {
		rep.HandedOpen = append(rep.HandedOpen, fdOpen(ps.FD))
	}
	emit("closed")
}

// procStatus returns the named fields of /proc/self/status.
func procStatus(t *testing.T, keys ...string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for l := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && slices.Contains(keys, k) {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

// readDatagrams reads up to n datagrams from pc within timeout.
func readDatagrams(pc net.PacketConn, n int, timeout time.Duration) []string {
	var got []string
	if err := pc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil
	}
	buf := make([]byte, 64)
	for len(got) < n {
		m, _, err := pc.ReadFrom(buf)
		if err != nil {
			break
		}
		got = append(got, string(buf[:m]))
	}
	return got
}

// unprivilegedTestBinary copies this test binary where uid 65534 can run
// it: t.TempDir and its parent are 0700, so both are opened to 0755.
func unprivilegedTestBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(filepath.Dir(dir)); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("uid 65534 cannot reach %s: %s is not searchable by others (%v)", dir, d, err)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "dataplane.test")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// appProc is the running child.
type appProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	eof    chan struct{}
	mu     sync.Mutex
	output bytes.Buffer // everything else the child wrote
	waited bool
}

// startApp starts the child as uid/gid 65534 with no supplementary groups
// and no capabilities, with duplicates of fds as its fds 3, 4, ...
func startApp(t *testing.T, exe string, par appParams, fds ...int) *appProc {
	t.Helper()
	js, err := json.Marshal(par)
	if err != nil {
		t.Fatal(err)
	}
	a := &appProc{t: t, lines: make(chan string, 8), eof: make(chan struct{})}
	a.cmd = exec.Command(exe, "-test.run=^TestHelperAdoptedApp$", "-test.timeout=60s")
	a.cmd.Dir = filepath.Dir(exe)
	a.cmd.Env = append(os.Environ(), appEnv+"="+string(js))
	for _, fd := range fds {
		f := os.NewFile(uintptr(dup(t, fd)), fmt.Sprintf("fd %d", fd))
		defer f.Close() // the child has its own references once started
		a.cmd.ExtraFiles = append(a.cmd.ExtraFiles, f)
	}
	a.cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
		Pdeathsig:  syscall.SIGKILL,
	}
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.output.Write(p)
	})
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(a.eof)
		defer close(a.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "app "); ok {
				a.lines <- l
				continue
			}
			a.mu.Lock()
			fmt.Fprintln(&a.output, sc.Text())
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if !a.waited {
			a.cmd.Process.Kill()
			a.stdin.Close()
			for range a.lines {
			}
			a.cmd.Wait()
		}
	})
	return a
}

// expect waits for the child's report of phase.
func (a *appProc) expect(phase string) appReport {
	a.t.Helper()
	select {
	case l, ok := <-a.lines:
		if !ok {
			<-a.eof
			a.mu.Lock()
			defer a.mu.Unlock()
			a.t.Fatalf("child ended before %q:\n%s", phase, a.output.String())
		}
		var rep appReport
		if err := json.Unmarshal([]byte(l), &rep); err != nil || rep.Phase != phase {
			a.t.Fatalf("child reported %q (%v), want phase %q", l, err, phase)
		}
		return rep
	case <-time.After(20 * time.Second):
		a.t.Fatalf("no %q from the child in 20s", phase)
	}
	panic("unreachable")
}

func (a *appProc) send(line string) {
	a.t.Helper()
	if _, err := io.WriteString(a.stdin, line+"\n"); err != nil {
		a.t.Fatal(err)
	}
}

// wait waits for the child to exit and fails the test if it failed.
func (a *appProc) wait() {
	a.t.Helper()
	a.stdin.Close()
	for range a.lines {
	}
	<-a.eof
	err := a.cmd.Wait()
	a.waited = true
	if err != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.t.Fatalf("child: %v\n%s", err, a.output.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
