package agent_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// A squatter creates, before its victim, the AV the victim's program will
// ask for ("pingpong-7100": `xdpfab pingpong` names its AV by port). The
// victim's av.create used to succeed, opening the squatter's AV: its
// inserts and its destroy then failed with EACCES, and its endpoint bound
// to an AV whose entries the squatter chose. Now av.create of an AV the
// caller may not change is EEXIST naming the owner, the owner, its group
// and root still reopen it, and xdpfab pingpong refuses an AV it does not
// own even when the agent lets it in (it is in the AV's group).
func TestAVCreateOfAnotherUIDsAV(t *testing.T) {
	n := newNode(t)
	n.startAgent("--socket-group", "65534")
	const squatter, victim, member = 4242, 4243, 4244
	const group = 7777
	sq := mustDialAs(t, n.socket, squatter, nobody, group)
	for _, args := range []ctl.AVCreateArgs{{Name: "pingpong-7100"}, {Name: "pingpong-7101", Group: "7777"}} {
		if _, err := sq.AVCreate(args); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := sq.AVInsert(ctl.AVInsertArgs{Name: "pingpong-7100", Addrs: []string{"198.18.66.6:7000"}}); err != nil || r.Inserted != 1 {
		t.Fatal(r, err)
	}

	vi := mustDialAs(t, n.socket, victim, nobody)
	_, err := vi.AVCreate(ctl.AVCreateArgs{Name: "pingpong-7100"})
	wantErrno(t, "create of another uid's AV", err, fi.EEXIST)
	if err != nil && !strings.Contains(err.Error(), "uid 4242") {
		t.Errorf("the refusal does not name the owner: %v", err)
	}
	if _, err := vi.AVLookup("pingpong-7100", 0); err != nil {
		t.Errorf("reading another uid's AV: %v", err)
	}
	// Who may change it opens it, as before.
	if _, err := sq.AVCreate(ctl.AVCreateArgs{Name: "pingpong-7100"}); err != nil {
		t.Errorf("the owner reopens its AV: %v", err)
	}
	if _, err := mustDialAs(t, n.socket, member, nobody, group).AVCreate(ctl.AVCreateArgs{Name: "pingpong-7101"}); err != nil {
		t.Errorf("a member of the AV's group reopens it: %v", err)
	}
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "pingpong-7100"}); err != nil {
		t.Errorf("root reopens it: %v", err)
	}

	// xdpfab pingpong as the victim: on the squatter's AV (EEXIST from the
	// agent), and on one of the squatter's group the victim is in (the
	// agent lets it in; pingpong refuses it).
	for _, port := range []uint16{7100, 7101} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, xdpfabBin, "pingpong", "server", "--iface", testbed.LinkName,
			"--local", netip.AddrPortFrom(n.bed.A.IPv4, port).String(), "--socket", n.socket, "--via", "agent")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: victim, Gid: nobody, Groups: []uint32{group}}, Pdeathsig: syscall.SIGKILL}
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := n.bed.A.Do(cmd.Run)
		ran := ctx.Err() != nil // until killed: it served on the squatter's AV
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ran || !strings.Contains(out.String(), "uid 4242") {
			t.Errorf("pingpong server on port %d, whose AV uid %d made: %v\n%s", port, squatter, err, out.String())
		}
	}
	for _, name := range []string{"pingpong-7100", "pingpong-7101"} {
		if info, err := sq.AVList(name); err != nil || name == "pingpong-7100" && info.Entries != 1 {
			t.Errorf("the squatter's AV %s after the victim's runs: %+v %v", name, info, err)
		}
	}
}
