package bpf_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testutil"
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

// verifierBudget bounds the instructions the verifier may process for the
// program: 10% of its 1M limit. Every load pays for them (each agent start,
// each test that loads a dataplane); a loop the verifier walks iteration by
// iteration, or branches that multiply its states, show here long before
// the limit refuses the program on some kernel
// (docs/platform.md#loops-over-packet-memory).
const verifierBudget = 100_000

// The verifier's own count of the instructions it processed for the
// program (LogLevelStats), against verifierBudget.
func TestVerifierCost(t *testing.T) {
	testutil.RequirePrivileged(t)
	spec, err := bpf.LoadSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	for name, p := range coll.Programs {
		m := regexp.MustCompile(`processed (\d+) insns`).FindStringSubmatch(p.VerifierLog)
		if m == nil {
			t.Fatalf("program %s: no instruction count in the verifier's log: %q", name, p.VerifierLog)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("program %s: the verifier processed %d instructions", name, n)
		if n > verifierBudget {
			t.Errorf("program %s: the verifier processed %d instructions, above the budget of %d: %s",
				name, n, verifierBudget, strings.TrimSpace(p.VerifierLog))
		}
	}
}
