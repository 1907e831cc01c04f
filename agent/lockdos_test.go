package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// serveBound is how long an operation may take while a member holds
// whatever locks it can: without them it takes milliseconds.
const serveBound = 2 * time.Second

// A member of the socket group takes every lock it can reach under the
// pin root (the pin root's and maps/', exclusively) and stops inside a
// read of a named AV with the pins open read-only, its dataplane locked
// for ever. The agent inserts, creates, and admits new connections as
// before: none of those is the lock the agent waits for, which the member
// cannot open.
func TestMemberCannotFreezeAgent(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = fmt.Sprint(nobody) })
	pinRoot := filepath.Join(filepath.Dir(sock), "bpffs")
	root := mustDial(t, sock)
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.AVInsert(ctl.AVInsertArgs{Name: "shared", Addrs: []string{"198.18.9.1:7000"}}); err != nil {
		t.Fatal(err)
	}

	// The member: a reader of the pins that stops inside a read (its
	// dataplane locked for ever), and a process that locks the pin root
	// and maps/, which it may open.
	var ro *loader.Objects
	var held []int
	asUser(t, nobody, nobody, func() {
		var err error
		if ro, err = loader.OpenPinned(pinRoot); err != nil {
			t.Errorf("the member opens the pins: %v", err)
			return
		}
		if !av.Exists(ro, "shared") {
			t.Errorf("the member does not see the named AV")
		}
		for _, p := range []string{pinRoot, filepath.Join(pinRoot, "maps")} {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Errorf("the member opens %s: %v", p, err)
				continue
			}
			held = append(held, fd)
		}
		fd, err := unix.Open(loader.LockPath(pinRoot), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			held = append(held, fd)
		}
		if !errors.Is(err, unix.EACCES) {
			t.Errorf("the member opens the writers' lock %s: %v, want EACCES", loader.LockPath(pinRoot), err)
		}
	})
	var once sync.Once
	roUnlock := func() {}
	if ro != nil {
		u := ro.Lock()
		roUnlock = func() { once.Do(u) }
	}
	for _, fd := range held {
		unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	release := func() {
		roUnlock()
		for _, fd := range held {
			unix.Close(fd)
		}
		held = nil
	}
	defer func() {
		release()
		ro.Close()
	}()

	// Everything at once: a create holds the agent's own lock while it
	// waits for the maps' (av.Open), and admitting a connection takes it.
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished := map[string]bool{}
	run := func(what string, fn func() error) {
		wg.Go(func() {
			err := fn()
			mu.Lock()
			finished[what] = true
			mu.Unlock()
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	run("insert", func() error {
		_, err := root.AVInsert(ctl.AVInsertArgs{Name: "shared", Addrs: []string{"198.18.9.2:7000"}})
		return err
	})
	run("create", func() error {
		_, err := root.AVCreate(ctl.AVCreateArgs{Name: "another"})
		return err
	})
	run("remove", func() error { return root.AVRemove("shared", []fi.Addr{0}) })
	run("new connection's status", func() error {
		time.Sleep(50 * time.Millisecond) // after the create took the agent's lock
		c, err := client.Dial(sock)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Status()
		return err
	})
	run("the member's own connection", func() error {
		time.Sleep(50 * time.Millisecond)
		c, err := dialAs(t, sock, nobody, nobody)
		if err != nil {
			return err
		}
		_, err = c.AVCreate(ctl.AVCreateArgs{Name: "members"})
		return err
	})
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(serveBound):
		mu.Lock()
		var hung []string
		for _, w := range []string{"insert", "create", "remove", "new connection's status", "the member's own connection"} {
			if !finished[w] {
				hung = append(hung, w)
			}
		}
		mu.Unlock()
		t.Errorf("with a member holding what it can lock, not done within %v: %s", serveBound, strings.Join(hung, ", "))
		release() // let the agent go, so that it can stop
		<-done
	}
	roUnlock()
	if ro != nil && !av.Exists(ro, "another") {
		t.Errorf("the member's reader, reading without the writers' lock, does not see the AV created meanwhile")
	}
}

// A root process with the library holds the writers' lock and hangs: the
// agent's changes wait for it. A new agent would wait as well, so the
// agent says so in its log and goes on pinging the watchdog (a first
// version stopped pinging, and systemd would have restarted it in a loop);
// once the lock passes, the change goes through.
func TestWatchdogSeesStuckWritersLock(t *testing.T) {
	dir := t.TempDir()
	path, msgs := notifySocket(t, dir)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "200000") // a ping every 100 ms
	logs := &syncBuffer{}
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	if m := <-msgs; !strings.HasPrefix(m, "READY=1") {
		t.Fatalf("first notification %q", m)
	}
	pinRoot := filepath.Join(filepath.Dir(sock), "bpffs")
	hog, err := loader.Load(loader.Config{PinRoot: pinRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	c := mustDial(t, sock)

	unlock := hog.Lock()
	created := make(chan error, 1)
	go func() {
		_, err := c.AVCreate(ctl.AVCreateArgs{Name: "waits"})
		created <- err
	}()
	pings := 0
	for deadline := time.After(time.Second); pings >= 0; {
		select {
		case <-msgs:
			pings++
		case <-deadline:
			if pings < 5 {
				t.Errorf("%d pings in 1 s while another process held the writers' lock, want the usual 10", pings)
			}
			pings = -1
		}
	}
	if !strings.Contains(logs.String(), "which another process holds") {
		t.Errorf("no word of the held writers' lock in the log:\n%s", logs.String())
	}
	unlock()
	if err := <-created; err != nil {
		t.Errorf("create once the lock passed: %v", err)
	}
}

// lockBed is an agent's setting for the instance lock tests, with a
// LockDir of its own: start starts an agent (in this process) and returns
// its stop.
type lockBed struct {
	t             *testing.T
	bed           *testbed.Bed
	pinRoot, sock string
}

func newLockBed(t *testing.T) *lockBed {
	t.Helper()
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // the member may pass, as through /run/xdpfab
	b := &lockBed{t: t, bed: testbed.New(t, testbed.Options{}), pinRoot: filepath.Join(dir, "bpffs"), sock: filepath.Join(dir, "s")}
	t.Cleanup(func() { loader.UnmountBPFFS(b.pinRoot) })
	was := agent.LockDir
	agent.LockDir = filepath.Join(dir, "locks")
	t.Cleanup(func() { agent.LockDir = was })
	return b
}

func (b *lockBed) start() (stop func()) {
	t := b.t
	t.Helper()
	var a *agent.Agent
	err := b.bed.A.Do(func() (err error) {
		a, err = agent.New(agent.Config{Ifaces: []string{testbed.LinkName}, PinRoot: b.pinRoot, Socket: b.sock,
			SocketGroup: fmt.Sprint(nobody), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		return err
	})
	if err != nil {
		t.Fatalf("agent start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	c, err := client.Dial(b.sock)
	if err == nil {
		_, err = c.Status()
		c.Close()
	}
	if err != nil {
		t.Errorf("status: %v", err)
	}
	return func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// squat has the member open each of paths and wait for its lock, which
// it then holds until the test ends: fails, unless open is expected to
// succeed (wantErr nil).
func (b *lockBed) squat(paths []string, wantErr error) {
	t := b.t
	t.Helper()
	var held []int
	asUser(t, nobody, nobody, func() {
		for _, p := range paths {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if wantErr == nil || !errors.Is(err, wantErr) {
					t.Errorf("the member opens %s: %v, want %v", p, err, wantErr)
				}
				continue
			}
			if wantErr != nil {
				t.Errorf("the member opens the agent's lock %s", p)
			}
			held = append(held, fd)
		}
	})
	for _, fd := range held {
		// Blocks until the agent that holds it exits, then holds it.
		go unix.Flock(fd, unix.LOCK_EX)
	}
	t.Cleanup(func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	})
	time.Sleep(50 * time.Millisecond) // flocks free to take are taken
}

// The instance locks are the agent's user's alone: a member of the socket
// group cannot open them, to hold them once the agent exits and keep the
// next one from starting (EBUSY, which systemd does not retry). A
// restarted agent comes up; one that stopped leaves no lock file.
func TestMemberCannotSquatInstanceLock(t *testing.T) {
	b := newLockBed(t)
	stop := b.start()
	var st unix.Stat_t
	if err := unix.Lstat(agent.LockDir, &st); err != nil || st.Mode&0o777 != 0o700 {
		t.Errorf("lock directory: mode %#o %v, want 0700", st.Mode&0o777, err)
	}
	ents, _ := os.ReadDir(agent.LockDir)
	var locks []string
	for _, e := range ents {
		p := filepath.Join(agent.LockDir, e.Name())
		locks = append(locks, p)
		if err := unix.Lstat(p, &st); err != nil || st.Mode&0o777 != 0o600 || st.Nlink != 1 {
			t.Errorf("lock file %s: mode %#o, %d links, %v; want 0600, 1", p, st.Mode&0o777, st.Nlink, err)
		}
	}
	if len(locks) != 2 {
		t.Errorf("lock files %v, want one for the socket and one for the pin root", locks)
	}
	if _, err := os.Lstat(b.sock + ".lock"); err == nil {
		locks = append(locks, b.sock+".lock")
	}
	b.squat(locks, unix.EACCES)
	stop()
	if ents, _ := os.ReadDir(agent.LockDir); len(ents) != 0 {
		t.Errorf("a stopped agent left %d lock files", len(ents))
	}
	b.start()()
}

// Lock files open to others, as an earlier layout left them (or made by
// hand), held by the member before the agent starts: the agent replaces
// them with its own and takes the directory back.
func TestLooseInstanceLocksReplaced(t *testing.T) {
	b := newLockBed(t)
	if err := os.Mkdir(agent.LockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	loose := []string{
		filepath.Join(agent.LockDir, "pin"+strings.ReplaceAll(b.pinRoot, "/", "%")+".lock"),
		filepath.Join(agent.LockDir, "sock"+strings.ReplaceAll(b.sock, "/", "%")+".lock"),
		b.sock + ".lock",
	}
	for _, p := range loose {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o644)
	}
	b.squat(loose, nil)
	stop := b.start()
	if fi, err := os.Stat(agent.LockDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("lock directory: %v %v, want 0700", fi.Mode(), err)
	}
	stop()
}

func mustDial(t *testing.T, sock string) *client.Client {
	t.Helper()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
