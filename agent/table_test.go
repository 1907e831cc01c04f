package agent

import (
	"testing"

	"github.com/xdpfab/xdpfab/ctl"
)

// Every operation of the protocol has exactly one handler, and the table
// has nothing else (the handshake is handled before dispatch).
func TestHandlerTableCoversProtocol(t *testing.T) {
	table := (&Agent{}).handlerTable()
	for _, name := range ctl.Ops() {
		_, ok := table[name]
		if name == ctl.OpHello.Name() {
			if ok {
				t.Errorf("%s is in the dispatch table; the handshake comes first", name)
			}
			continue
		}
		if !ok {
			t.Errorf("operation %s has no handler", name)
		}
		delete(table, name)
	}
	for name := range table {
		t.Errorf("handler for %s, which ctl does not declare", name)
	}
}
