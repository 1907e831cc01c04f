package av_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// Insert peers, look one up, remove it. Needs root (BPF maps).
func Example() {
	dp, err := loader.Load(loader.Config{}) // private, unpinned maps
	if err != nil {
		panic(err)
	}
	defer dp.Close()
	a, err := av.Open(dp, &av.Attr{Type: av.TypeTable})
	if err != nil {
		panic(err)
	}
	defer a.Close()

	peers := []netip.AddrPort{
		netip.MustParseAddrPort("198.18.0.1:5000"),
		netip.MustParseAddrPort("198.18.0.2:5000"),
		netip.MustParseAddrPort("[2001:2::3]:5000"),
	}
	fiAddr := make([]fi.Addr, len(peers))
	n, err := a.Insert(peers, fiAddr, 0, nil)
	fmt.Printf("inserted %d: %v\n", n, fiAddr)

	ap, _ := a.LookupAddr(1)
	fmt.Println(1, "is", fi.FormatAddrStr(ap))

	a.Remove(fiAddr[1:2], 0)
	_, err = a.LookupAddr(1)
	fmt.Println("after remove:", fi.Code(err).Name(), errors.Is(err, fi.EINVAL))
	// Prints (as root; TestLookup, TestSyncErr and TestReadOnlyRefusesWrites assert the same):
	// inserted 3: [0 1 2]
	// 1 is fi_sockaddr_in://198.18.0.2:5000
	// after remove: EINVAL true
}

// Per-element errors with FI_SYNC_ERR.
func ExampleAV_Insert_syncErr() {
	dp, _ := loader.Load(loader.Config{})
	defer dp.Close()
	a, _ := av.Open(dp, &av.Attr{})
	defer a.Close()

	peers := []netip.AddrPort{netip.MustParseAddrPort("198.18.0.1:5000"), netip.MustParseAddrPort("198.18.0.2:0")}
	status := make([]fi.Errno, len(peers))
	fiAddr := make([]fi.Addr, len(peers))
	n, _ := a.Insert(peers, fiAddr, fi.SyncErr, status)
	fmt.Printf("%d of %d inserted; status [%d %s]; fi_addr %v\n", n, len(peers), status[0], status[1].Name(), fiAddr)
	// Prints (as root): 1 of 2 inserted; status [0 EADDRNOTAVAIL]; fi_addr [0 NOTAVAIL]
}

// Named AVs are shared by the processes that load the same pinned
// dataplane; FI_READ opens one read-only.
func ExampleOpen_named() {
	root, _ := os.MkdirTemp("", "xdpfab-example")
	defer os.RemoveAll(root)
	defer loader.UnmountBPFFS(root)
	dp, err := loader.Load(loader.Config{PinRoot: root}) // mounts bpffs on root
	if err != nil {
		panic(err)
	}
	defer dp.Close()
	defer dp.Unpin()

	w, _ := av.Open(dp, &av.Attr{Name: "job42"})
	defer w.Close()
	w.Insert([]netip.AddrPort{netip.MustParseAddrPort("198.18.0.9:7000")}, nil, 0, nil)

	// Another process would Load the same PinRoot; the name finds the table.
	r, _ := av.Open(dp, &av.Attr{Name: "job42", Flags: fi.Read})
	defer r.Close()
	ap, _ := r.LookupAddr(0)
	fmt.Println("reader sees", fi.FormatAddrStr(ap))
	_, err = r.Insert([]netip.AddrPort{netip.MustParseAddrPort("198.18.0.10:7000")}, nil, 0, nil)
	fmt.Println("reader insert:", fi.Code(err).Name())
	// Prints (as root; TestLookup, TestSyncErr and TestReadOnlyRefusesWrites assert the same):
	// reader sees fi_sockaddr_in://198.18.0.9:7000
	// reader insert: EACCES
}
