package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// The agent in this process, so the race detector sees it: status,
// metrics scrapes, AV changes and a detach run concurrently, then it stops.
// Also the request bounds: replies always fit one message.
func TestAgentInProcess(t *testing.T) {
	a, bed, sock := inProcessAgent(t)
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "big"}); err != nil {
		t.Fatal(err)
	}

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return bed.A.Dial(network, addr)
	}}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { // scrapes
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := hc.Get("http://" + a.MetricsAddr() + "/metrics"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
	wg.Go(func() { // status from a second connection
		c2, err := client.Dial(sock)
		if err != nil {
			t.Error(err)
			return
		}
		defer c2.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c2.Status(); err != nil {
				t.Error(err)
				return
			}
		}
	})

	// 20,000 addresses: more than one request and one reply page hold.
	addrs := make([]string, 20000)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("198.19.%d.%d:%d", i/250, i%250+1, 7000+i%3)
	}
	r, err := c.AVInsert(ctl.AVInsertArgs{Name: "big", Addrs: addrs})
	if err != nil || r.Inserted != len(addrs) {
		t.Fatalf("insert: %d %v", r.Inserted, err)
	}
	list, err := c.AVList("big")
	if err != nil || len(list.List) != len(addrs) || list.List[19999].FiAddr != 19999 {
		t.Errorf("list: %d entries %v", len(list.List), err)
	}
	// Too many in one request: refused before anything changes.
	if _, err := c.AVInsertSym(ctl.AVInsertSymArgs{Name: "big", Node: "198.18.0.1", NodeCnt: 300, Service: "1000", SvcCnt: 300}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("insertsym of 90,000: %v", err)
	}
	if info, _ := c.AVList("big"); info.Entries != len(addrs) {
		t.Errorf("refused insertsym changed the AV: %d entries", info.Entries)
	}
	if err := c.Detach(testbed.LinkName); err != nil {
		t.Error(err)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
}

// inProcessAgent runs an agent in this process on a new bed's side A, until
// the test ends; it returns the agent, the bed and the control socket.
func inProcessAgent(t *testing.T, adjust ...func(*agent.Config)) (*agent.Agent, *testbed.Bed, string) {
	t.Helper()
	a, bed, sock, _ := runAgent(t, adjust...)
	return a, bed, sock
}

// runAgent is inProcessAgent that also returns stop, which ends the agent
// and returns Run's error (the test's cleanup does, if it has not).
func runAgent(t *testing.T, adjust ...func(*agent.Config)) (a *agent.Agent, bed *testbed.Bed, sock string, stop func() error) {
	t.Helper()
	testutil.RequirePrivileged(t)
	bed = testbed.New(t, testbed.Options{})
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // the test's own 0700 directory: others may reach the socket
	root := filepath.Join(dir, "bpffs")
	sock = filepath.Join(dir, "s")
	t.Cleanup(func() { loader.UnmountBPFFS(root) })
	err := bed.A.Do(func() (err error) {
		cfg := agent.Config{Ifaces: []string{testbed.LinkName}, PinRoot: root, Socket: sock,
			MetricsAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for _, f := range adjust {
			f(&cfg)
		}
		a, err = agent.New(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	stopped, result := false, error(nil)
	stop = func() error {
		if !stopped {
			cancel()
			result, stopped = <-ran, true
		}
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a, bed, sock, stop
}

// The agent's process runs out of descriptors while clients connect (each
// connection and each endpoint holds some of the agent's): it waits and
// serves on once some are free, instead of ending for every client (accept
// failed with EMFILE, and the agent stopped).
func TestAgentSurvivesRunningOutOfDescriptors(t *testing.T) {
	_, _, sock := inProcessAgent(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(len(open) + 8)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
			restored = true
		}
	}
	defer restore()
	var conns []net.Conn
	for range 32 {
		c, err := net.Dial("unixpacket", sock)
		if err != nil {
			break // this process (the agent's too) is out of descriptors
		}
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // the agent's accepts fail meanwhile
	for _, c := range conns {
		c.Close()
	}
	restore()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatalf("after running out of descriptors, the agent serves no more: %v", err)
	}
	c.Close()
}
