package ctl_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// FuzzDecodeRequest feeds the protocol decoder what a hostile client could
// send as one message: the envelope as ReadMsg parses it, then the
// arguments as the agent decodes them for whatever operation the message
// names (and for every other operation too). The decoder must never panic,
// and every refusal must carry EINVAL. Run long with
// `go test -fuzz=FuzzDecodeRequest ./ctl` (make fuzz).
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"id":1,"op":"hello","args":{"version":1,"client":"x"}}`,
		`{"id":2,"op":"ep.open","args":{"iface":"eth0","local":"0.0.0.0:53","av":"a","queues":4611686018427387904}}`,
		`{"id":3,"op":"av.insert","args":{"name":"j","addrs":["198.18.0.1:1"],"user_ids":[18446744073709551615],"flags":262144}}`,
		`{"id":4,"op":"av.insertsym","args":{"name":"j","node":"198.18.0.1","node_cnt":-1,"service":"1","svc_cnt":1e9}}`,
		`{"id":5,"op":"av.create","args":{"name":"\u202e\xff","count":-1}}`,
		`{"id":6,"op":"av.straddr","args":{"name":"j","addr":"AAAA"}}`,
		`{"id":7,"op":"neigh.use","args":{"ifindex":-1,"ip":"::"}}`,
		`{"id":8,"op":"ep.report","args":{"id":1,"tx":{"depth":-5},"rx":null}}`,
		`{"id":18446744073709551615,"op":"","args":[]}`,
		`{"op":"status","args":null}`, `[]`, `null`, `{"id":"x"}`, `{"args":{"a":{"a":{"a":[[[[[]]]]]}}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var req ctl.Request
		if err := json.Unmarshal(msg, &req); err != nil {
			return // ReadMsg answers EINVAL for this message
		}
		for _, name := range append(ctl.Ops(), req.Op) {
			args := ctl.NewArgs(name)
			if args == nil {
				continue // unknown operation: ENOSYS, never decoded
			}
			if err := ctl.Decode(req.Args, args); err != nil && !errors.Is(err, fi.EINVAL) {
				t.Fatalf("%s: decode error without EINVAL: %v", name, err)
			}
		}
	})
}

func TestNewArgs(t *testing.T) {
	if _, ok := ctl.NewArgs(ctl.OpAVInsert.Name()).(*ctl.AVInsertArgs); !ok {
		t.Errorf("NewArgs(av.insert) = %T", ctl.NewArgs(ctl.OpAVInsert.Name()))
	}
	if ctl.NewArgs("no.such") != nil {
		t.Error("NewArgs of an unknown operation is not nil")
	}
}
