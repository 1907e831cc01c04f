package bpf_test

import (
	"testing"

	"github.com/cilium/ebpf/asm"
	"github.com/xdpfab/xdpfab/bpf"
)

// No program of the object calls a helper that some kernels refuse to XDP
// programs: bpf_xdp_adjust_meta (docs/platform.md#xdp-metadata). This runs
// without root, so a kernel that allows the helper still catches its return.
func TestObjectAvoidsRefusedHelpers(t *testing.T) {
	spec, err := bpf.LoadSpec()
	if err != nil {
		t.Fatal(err)
	}
	refused := map[asm.BuiltinFunc]bool{asm.FnXdpAdjustMeta: true}
	calls := 0
	for name, p := range spec.Programs {
		for _, ins := range p.Instructions {
			if !ins.IsBuiltinCall() {
				continue
			}
			calls++
			if fn := asm.BuiltinFunc(ins.Constant); refused[fn] {
				t.Errorf("program %s calls %v", name, fn)
			}
		}
	}
	if calls == 0 {
		t.Fatal("no helper calls found: the check looks at nothing")
	}
}
