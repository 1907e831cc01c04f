package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// fuzzAgent is an agent on private (unpinned) objects with no interface,
// socket or metrics: enough to run every handler.
func fuzzAgent(tb testing.TB) *Agent {
	if os.Geteuid() != 0 {
		tb.Skip("needs root (BPF maps)")
	}
	objs, err := loader.Load(loader.Config{AVEntries: 256, MaxAVs: 8, MaxEndpoints: 8, XSKSlots: 8})
	if err != nil {
		tb.Fatal(err)
	}
	a := &Agent{dp: objs, log: slog.New(slog.NewTextHandler(io.Discard, nil)), avs: map[string]*av.AV{},
		clients: map[*conn]struct{}{}, usage: map[uint32]*usage{}, adminGID: -1}
	a.cfg.Limits.defaults()
	a.handlers = a.handlerTable()
	tb.Cleanup(func() {
		for _, v := range a.avs {
			v.Close()
		}
		objs.Close()
	})
	return a
}

// FuzzDispatch sends whatever a hostile group member could send, once
// past the handshake, through the agent's dispatch table against real
// maps: no request may panic the agent, every failure carries an errno,
// and the agent answers normally afterwards. Seeds run in make test; make
// fuzz runs it long.
func FuzzDispatch(f *testing.F) {
	for _, seed := range []struct{ op, args string }{
		{"av.create", `{"name":"a"}`},
		{"av.create", `{"name":"../x","count":-1}`},
		{"av.create", `{"name":"b","type":"ring","rx_ctx_bits":99}`},
		{"av.insert", `{"name":"a","addrs":["198.18.0.1:1","[2001:2::1]:5","bogus","999.1.1.1:5",""],"user_ids":[1,2,3,4,5]}`},
		{"av.insert", `{"name":"a","addrs":["198.18.0.1:1"],"flags":18446744073709551615}`},
		{"av.insertsym", `{"name":"a","node":"198.18.0.1","node_cnt":-1,"service":"7000","svc_cnt":3}`},
		{"av.insertsym", `{"name":"a","node":"198.18.0.1","node_cnt":100000,"service":"7000","svc_cnt":100000}`},
		{"av.remove", `{"name":"a","fi_addrs":[0,0,18446744073709551615]}`},
		{"av.lookup", `{"name":"a","fi_addr":18446744073709551615}`},
		{"av.list", `{"name":"a","offset":-1,"limit":-5}`},
		{"av.straddr", `{"name":"a","addr":"AgAAAQEBAQE="}`},
		{"av.straddr", `{"name":"a","addr":""}`},
		{"av.set-user-id", `{"name":"a","fi_addr":0,"user_id":7}`},
		{"av.destroy", `{"name":"a"}`},
		{"ep.open", `{"iface":"lo","local":"0.0.0.0:53","av":"a","queues":4611686018427387904,"frames":131072}`},
		{"ep.close", `{"id":4294967295}`},
		{"ep.report", `{"id":1,"tx":{},"rx":{}}`},
		{"neigh.use", `{"ifindex":-1,"ip":"0.0.0.0"}`},
		{"detach", `{"iface":"lo"}`},
		{"maps.open", ``},
		{"status", ``},
		{"stats", `{"x":1}`},
	} {
		f.Add(seed.op, []byte(seed.args), false)
		f.Add(seed.op, []byte(seed.args), true)
	}
	a := fuzzAgent(f)
	f.Fuzz(func(t *testing.T, op string, args []byte, asRoot bool) {
		cn := &conn{who: caller{uid: 65534, gid: 65534, pid: 1}}
		if asRoot {
			cn.who = caller{uid: 0, gid: 0, pid: 1}
		}
		resp, fds := a.dispatch(cn, &ctl.Request{ID: 1, Op: op, Args: json.RawMessage(args)}, a.log)
		closeFDs(fds)
		if resp.Errno == 0 && resp.Error != "" || resp.Errno != 0 && resp.Error == "" {
			t.Fatalf("%s %s: inconsistent response %+v", op, args, resp)
		}
		if resp.Errno < 0 || fi.Errno(resp.Errno) == fi.EOTHER && op != "" {
			t.Logf("%s %s: %s", op, args, resp.Error) // an error without a specific errno: worth a look, not a failure
		}
		a.releaseClient(cn)
		if r, _ := a.dispatch(&conn{who: caller{}}, &ctl.Request{ID: 2, Op: ctl.OpStatus.Name()}, a.log); r.Errno != 0 {
			t.Fatalf("status after %s %s: %s", op, args, r.Error)
		}
	})
}
