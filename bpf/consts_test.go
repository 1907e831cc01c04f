package bpf_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
)

// The Go mirrors of xdpfab_consts.h and of the enums agree with the header.
func TestConstsMatchC(t *testing.T) {
	src, err := os.ReadFile("xdpfab_consts.h")
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:#define\s+)?(XDPFAB_\w+)\s*=?\s*(0x[0-9a-fA-F]+|\d+)`).FindAllStringSubmatch(string(src), -1) {
		v, err := strconv.ParseInt(m[2], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		c[m[1]] = v
	}
	for name, goVal := range map[string]int64{
		"XDPFAB_MAGIC": bpf.Magic, "XDPFAB_VERSION": bpf.Version, "XDPFAB_OP_MSG": bpf.OpMsg, "XDPFAB_OP_TAGGED": bpf.OpTagged,
		"XDPFAB_HF_CQ_DATA": bpf.HdrFlagData, "XDPFAB_META_KNOWN": bpf.MetaKnown, "XDPFAB_META_SOURCE_ERR": bpf.MetaSrcErr,
		"XDPFAB_META_USER_ID": bpf.MetaUserID, "XDPFAB_META_VERSION": bpf.MetaVersion, "XDPFAB_AVF_USER_ID": bpf.AVFUserID,
		"XDPFAB_AF_INET": bpf.AFInet, "XDPFAB_AF_INET6": bpf.AFInet6, "XDPFAB_IFINDEX_SLOTS": bpf.IfindexSlots,
		"XDPFAB_C_RX": int64(bpf.CounterRX), "XDPFAB_C_TRANSLATED": int64(bpf.CounterTranslated),
		"XDPFAB_C_UNKNOWN": int64(bpf.CounterUnknown), "XDPFAB_C_DROP_POLICY": int64(bpf.CounterDropPolicy),
		"XDPFAB_C_MALFORMED": int64(bpf.CounterMalformed), "XDPFAB_C_PASS": int64(bpf.CounterPass),
		"XDPFAB_C_REDIRECT_FAIL": int64(bpf.CounterRedirectFail), "XDPFAB_C_MAX": int64(bpf.NumCounters),
		"XDPFAB_POLICY_NOTAVAIL": int64(bpf.PolicyNotAvail), "XDPFAB_POLICY_SOURCE_ERR": int64(bpf.PolicySourceErr),
		"XDPFAB_POLICY_DROP": int64(bpf.PolicyDrop),
	} {
		cVal, ok := c[name]
		switch {
		case !ok:
			t.Errorf("%s not found in xdpfab_consts.h", name)
		case cVal != goVal:
			t.Errorf("%s = %d in C, %d in Go", name, cVal, goVal)
		}
	}
}
