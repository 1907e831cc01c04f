package agent_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// av insertsym of host names used to resolve them one after another while
// holding the AV owner's insert lock: a member of an AV's group that asked
// for up to 16384 slow names held up every insert into the owner's AVs for
// as long. The agent resolves them before it takes any lock, at most 1024
// names a request, within a time bound (EAGAIN past it).
func TestInsertSymResolvesOutsideLocks(t *testing.T) {
	release := make(chan struct{})
	var released bool
	unblock := func() {
		if !released {
			close(release)
			released = true
		}
	}
	defer unblock()
	// "slowNNNN" resolves once released, "neverNNNN" not within 5 s,
	// "hostNNNN" at once, each to 198.18.47.NNNN%250+1; anything else does not exist.
	restore := agent.SetLookupHost(func(ctx context.Context, host string) ([]netip.Addr, error) {
		base := strings.TrimRight(host, "0123456789")
		n, _ := strconv.Atoi(host[len(base):])
		switch base {
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "never":
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Second): // a resolution without a bound ends too
				return nil, errors.New("no answer")
			}
		case "host":
		default:
			return nil, errors.New("no such host")
		}
		return []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 47, byte(n%250 + 1)})}, nil
	}, time.Second)
	// Restored after the agent's cleanup has closed it: a request it still
	// serves when the test returns reads the hook (a race the detector
	// reported once, the test's deferred restore writing it meanwhile).
	t.Cleanup(restore)
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = "65534" })
	const owner, member, jobGroup = 4604, 4605, 7702
	oc := mustDialAs(t, sock, owner, nobody, jobGroup)
	for _, args := range []ctl.AVCreateArgs{{Name: "job", Group: strconv.Itoa(jobGroup)}, {Name: "own"}} {
		if _, err := oc.AVCreate(args); err != nil {
			t.Fatal(err)
		}
	}
	mc := mustDialAs(t, sock, member, nobody, jobGroup)
	slow := make(chan error, 1)
	go func() {
		r, err := mc.AVInsertSym(ctl.AVInsertSymArgs{Name: "job", Node: "slow0001", NodeCnt: 64, Service: "7000", SvcCnt: 2})
		if err == nil && r.Inserted != 128 {
			err = errors.New("inserted " + strconv.Itoa(r.Inserted) + " of 128")
		}
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond) // the member's names are being resolved
	// The owner's inserts, into the AV being resolved for and another,
	// are answered meanwhile.
	for _, name := range []string{"own", "job"} {
		done := make(chan error, 1)
		go func() {
			_, err := oc.AVInsert(ctl.AVInsertArgs{Name: name, Addrs: []string{"198.18.47.251:7000"}})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the owner's insert into %s: %v", name, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("the owner's insert into %s waited for the member's host names to resolve", name)
			unblock()
			<-done
		}
	}
	unblock()
	if err := <-slow; err != nil {
		t.Errorf("the member's insertsym once its names resolve: %v", err)
	}
	if info, err := oc.AVList("job"); err != nil || info.Entries != 129 {
		t.Errorf("job: %d entries, %v; want 129", info.Entries, err)
	}

	// Bounds: names per request, time per request; a name that does not
	// resolve fails the request before anything is inserted.
	_, err := mc.AVInsertSym(ctl.AVInsertSymArgs{Name: "job", Node: "host0001", NodeCnt: 1025, Service: "7000", SvcCnt: 1})
	wantErrno(t, "1025 host names in one request", err, fi.EINVAL)
	start := time.Now()
	_, err = mc.AVInsertSym(ctl.AVInsertSymArgs{Name: "job", Node: "never0001", NodeCnt: 100, Service: "7000", SvcCnt: 1})
	wantErrno(t, "names that never resolve", err, fi.EAGAIN)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("names that never resolve were given up after %v, the bound is 1 s", d)
	}
	_, err = mc.AVInsertSym(ctl.AVInsertSymArgs{Name: "job", Node: "nosuch0001", NodeCnt: 3, Service: "7000", SvcCnt: 1})
	wantErrno(t, "names that do not exist", err, fi.ENOENT)
	r, err := mc.AVInsertSym(ctl.AVInsertSymArgs{Name: "job", Node: "host0300", NodeCnt: 3, Service: "7100", SvcCnt: 2})
	if err != nil || r.Inserted != 6 {
		t.Errorf("insertsym of names that resolve: %+v %v", r, err)
	}
	if e, err := oc.AVLookup("job", r.FiAddrs[3]); err != nil || e.Addr != netip.MustParseAddrPort("198.18.47.52:7101") {
		t.Errorf("host0301, second service: %+v %v; want 198.18.47.52:7101", e, err)
	}
	if info, err := oc.AVList("job"); err != nil || info.Entries != 135 {
		t.Errorf("job: %d entries, %v; want 135", info.Entries, err)
	}
}
