package apitest

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/neigh"
	"github.com/xdpfab/xdpfab/stack"
	"github.com/xdpfab/xdpfab/wire"
)

// products are the packages whose exported API must not panic on nil and
// zero values, relative to the module root.
var products = []string{"av", "bpf", "client", "cq", "ctl", "dataplane", "ep", "fi", "loader", "neigh", "stack", "wire"}

// subject is one exported type with methods, as the probe calls it.
type subject struct {
	// nilPtr is a nil pointer to the type, when it has pointer methods.
	nilPtr any
	// zero is a pointer to the zero value when it has pointer methods,
	// else the zero value.
	zero any
	// zeroWorks: the type's zero value is documented to be ready to use,
	// so its methods' errors are not judged (they must still not panic).
	zeroWorks bool
	// name is package.Type when the type is an alias of an unexported
	// one (bpf's generated types), which reflection cannot tell.
	name string
	// nilSkip are methods not called on the nil pointer, each for a
	// reason given where the subject is listed.
	nilSkip []string
}

// subjects lists every exported type with methods of the product
// packages; TestSubjectsComplete fails when one is missing.
var subjects = []subject{
	{nilPtr: (*av.AV)(nil), zero: &av.AV{}},
	{nilPtr: (*av.EventQueue)(nil), zero: &av.EventQueue{}, zeroWorks: true},
	{nilPtr: (*av.InsertError)(nil), zero: &av.InsertError{}, zeroWorks: true},
	{zero: av.Type(0)},

	{nilPtr: (*cq.CQ)(nil), zero: &cq.CQ{}},
	{nilPtr: (*cq.Producer)(nil), zero: &cq.Producer{}},
	{nilPtr: (*cq.WaitSet)(nil), zero: &cq.WaitSet{}},
	{zero: cq.Command(0)},
	{zero: cq.Format(0)},
	{zero: cq.WaitCond(0)},
	{zero: cq.WaitObj(0)},

	{nilPtr: (*ep.Endpoint)(nil), zero: &ep.Endpoint{}},
	{nilPtr: (*ep.Prepared)(nil), zero: &ep.Prepared{}},
	{nilPtr: (*ep.Domain)(nil), zero: &ep.Domain{}},
	{nilPtr: (*ep.LocalChannel)(nil), zero: &ep.LocalChannel{}},
	{nilPtr: (*ep.Doorbell)(nil), zero: &ep.Doorbell{}},
	{nilPtr: (*ep.RxContext)(nil), zero: &ep.RxContext{}},

	{nilPtr: (*loader.Objects)(nil), zero: &loader.Objects{}},
	{nilPtr: (*loader.Attachment)(nil), zero: &loader.Attachment{}},
	{nilPtr: (*loader.StampPage)(nil), zero: &loader.StampPage{}},
	{zero: loader.Mode(0)},

	{nilPtr: (*dataplane.UMEM)(nil), zero: &dataplane.UMEM{}},
	{nilPtr: (*dataplane.Socket)(nil), zero: &dataplane.Socket{}},
	{nilPtr: (*dataplane.ShareBlock)(nil), zero: &dataplane.ShareBlock{}},
	{zero: dataplane.ShareConfig{}, zeroWorks: true},
	{zero: dataplane.BindMode(0)},

	{nilPtr: (*neigh.Resolver)(nil), zero: &neigh.Resolver{}},
	{nilPtr: (*neigh.Cache)(nil), zero: &neigh.Cache{}},

	{nilPtr: (*client.Client)(nil), zero: &client.Client{}},

	{zero: ctl.Op[ctl.None, ctl.None]{}},
	{nilPtr: (*ctl.RemoteError)(nil), zero: &ctl.RemoteError{}, zeroWorks: true},
	{nilPtr: (*ctl.Response)(nil), zero: &ctl.Response{}, zeroWorks: true},

	{nilPtr: (*stack.Stack)(nil), zero: &stack.Stack{}},

	{zero: fi.Addr(0)},
	{zero: fi.AddrFormat(0)},
	{zero: fi.Errno(0)},
	{zero: fi.Flags(0)},
	{zero: fi.Threading(0)},

	{nilPtr: (*wire.Frame)(nil), zero: &wire.Frame{}, zeroWorks: true},
	{nilPtr: (*wire.Hdr)(nil), zero: &wire.Hdr{}, zeroWorks: true},
	{nilPtr: (*wire.Meta)(nil), zero: &wire.Meta{}, zeroWorks: true},
	{nilPtr: (*wire.Template)(nil), zero: &wire.Template{}, zeroWorks: true},

	{nilPtr: (*bpf.AVMeta)(nil), zero: &bpf.AVMeta{}, zeroWorks: true, name: "bpf.AVMeta"},
	// bpf2go generates Objects.Close, which dereferences its receiver;
	// a guard in the generated file would be lost at the next make
	// generate (the package doc says to close only a loaded Objects).
	{nilPtr: (*bpf.Objects)(nil), zero: &bpf.Objects{}, zeroWorks: true, name: "bpf.Objects", nilSkip: []string{"Close"}},
	{zero: bpf.Addr{}, name: "bpf.Addr"},
	{zero: bpf.Counter(0), name: "bpf.Counter"},
}

// releases are the methods that release what a value holds: on a nil or
// zero value there is nothing to release and they return nil, as a second
// Close does.
var releases = map[string]bool{"Close": true, "Unbind": true, "Unpin": true, "Reclaim": true}

// releaseMethods are the release methods outside releases' names.
var releaseMethods = map[string]bool{"*loader.Attachment.Detach": true}

// unjudged are methods whose error result is data, not a failure: an
// error's Unwrap.
var unjudged = map[string]bool{"Unwrap": true}

// TestZeroReceivers calls every exported method of every subject on a nil
// pointer and on a fresh zero value, with zero arguments. None may panic or
// block; one with an error result must fail with an error wrapping
// fi.EINVAL or fi.EOPBADSTATE (on a zero value documented to work, any
// outcome), except a release method, which returns nil.
func TestZeroReceivers(t *testing.T) {
	for _, s := range subjects {
		for _, v := range []any{s.nilPtr, s.zero} {
			if v == nil {
				continue
			}
			isNil := v == s.nilPtr
			var skip []string
			if isNil {
				skip = s.nilSkip
			}
			typ := reflect.TypeOf(v).String()
			mk := func() any { return v }
			if rt := reflect.TypeOf(v); !isNil && rt.Kind() == reflect.Pointer {
				mk = func() any { return reflect.New(rt.Elem()).Interface() }
			}
			testutil.EveryMethodOf(t, mk, func(method string, out []reflect.Value) {
				err, has := testutil.LastError(out)
				if !has || unjudged[method] || (!isNil && s.zeroWorks) {
					return
				}
				what := typ + "." + method
				if !isNil {
					what += " on a zero value"
				} else {
					what += " on a nil pointer"
				}
				switch {
				case releases[method] || releaseMethods[typ+"."+method]:
					if err != nil {
						t.Errorf("%s = %v, want nil (nothing to release)", what, err)
					}
				case err == nil:
					t.Errorf("%s = nil error, want one wrapping EINVAL or EOPBADSTATE", what)
				case !errors.Is(err, fi.EINVAL) && !errors.Is(err, fi.EOPBADSTATE):
					t.Errorf("%s = %v (%v), want an error wrapping EINVAL or EOPBADSTATE", what, err, fi.Code(err))
				default:
					t.Logf("%s: %v", what, err)
				}
			}, skip...)
		}
	}
}

// TestZeroFuncs calls every exported function of the product packages
// with zero arguments (nil pointers, slices and maps, zero numbers and
// configurations, empty strings). None may panic or block; one that takes
// a pointer, given nil, must fail with an error wrapping fi.EINVAL.
// Whatever a call opens is closed again.
func TestZeroFuncs(t *testing.T) {
	for name, fn := range funcs() {
		fv := reflect.ValueOf(fn)
		out, ok := testutil.CallZero(t, name+" with zero arguments", fv)
		if !ok {
			continue
		}
		for _, o := range out {
			if c, ok := o.Interface().(io.Closer); ok && !(o.Kind() == reflect.Pointer && o.IsNil()) {
				c.Close()
			}
		}
		err, has := testutil.LastError(out)
		if !has {
			continue
		}
		if takesPointer(fv.Type()) && !errors.Is(err, fi.EINVAL) {
			t.Errorf("%s with a nil pointer = %v, want an error wrapping EINVAL", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

func takesPointer(ft reflect.Type) bool {
	for i := range ft.NumIn() {
		if ft.In(i).Kind() == reflect.Pointer {
			return true
		}
	}
	return false
}

// funcs are the exported functions of the product packages, by name
// (package.Func); TestFuncsComplete fails when one is missing.
func funcs() map[string]any {
	return map[string]any{
		"av.ValidName":     av.ValidName,
		"av.IsAuthKeyAddr": av.IsAuthKeyAddr,
		"av.Open":          av.Open,
		"av.Destroy":       av.Destroy,
		"av.Exists":        av.Exists,
		"av.DestroyOrphan": av.DestroyOrphan,
		"av.OwnerOf":       av.OwnerOf,
		"av.Slots":         av.Slots,
		"av.NewEventQueue": av.NewEventQueue,

		"cq.Open":        cq.Open,
		"cq.OpenWaitSet": cq.OpenWaitSet,

		"ep.Open":           ep.Open,
		"ep.Prepare":        ep.Prepare,
		"ep.Adopt":          ep.Adopt,
		"ep.ReclaimDead":    ep.ReclaimDead,
		"ep.Entries":        ep.Entries,
		"ep.NewSerialGroup": ep.NewSerialGroup,
		"ep.TraceNow":       ep.TraceNow,

		"ep.NewLocalChannel": ep.NewLocalChannel,
		"ep.NewDoorbell":     ep.NewDoorbell,
		"ep.ShmSource":       ep.ShmSource,

		"loader.ParseMode":           loader.ParseMode,
		"loader.IsBPFFS":             loader.IsBPFFS,
		"loader.UnmountBPFFS":        loader.UnmountBPFFS,
		"loader.Load":                loader.Load,
		"loader.OpenPinned":          loader.OpenPinned,
		"loader.FromFDs":             loader.FromFDs,
		"loader.WaitReaders":         loader.WaitReaders,
		"loader.LockPath":            loader.LockPath,
		"loader.NewStampPage":        loader.NewStampPage,
		"dataplane.AdoptSocket":      dataplane.AdoptSocket,
		"dataplane.Open":             dataplane.Open,
		"dataplane.ThreadNetns":      dataplane.ThreadNetns,
		"dataplane.NewUMEM":          dataplane.NewUMEM,
		"dataplane.NewShareBlock":    dataplane.NewShareBlock,
		"dataplane.AttachShareBlock": dataplane.AttachShareBlock,
		"ep.NewDomain":               ep.NewDomain,
		"dataplane.AttachUMEM":       dataplane.AttachUMEM,

		"neigh.New": neigh.New,

		"client.Dial":         client.Dial,
		"client.OpenAVPinned": client.OpenAVPinned,

		"ctl.CheckVersion":   ctl.CheckVersion,
		"ctl.ErrorResponse":  ctl.ErrorResponse,
		"ctl.Decode":         ctl.Decode,
		"ctl.WriteMsg":       ctl.WriteMsg,
		"ctl.ReadMsg":        ctl.ReadMsg,
		"ctl.Ops":            ctl.Ops,
		"ctl.NewArgs":        ctl.NewArgs,
		"ctl.Clean":          ctl.Clean,
		"ctl.Quote":          ctl.Quote,
		"ctl.ClipText":       ctl.ClipText,
		"ctl.EncodeMsg":      ctl.EncodeMsg,
		"ctl.WriteEncoded":   ctl.WriteEncoded,
		"ctl.ReadMsgKeepFDs": ctl.ReadMsgKeepFDs,

		"stack.Open": stack.Open,

		"fi.RxAddr":         fi.RxAddr,
		"fi.GroupAddr":      fi.GroupAddr,
		"fi.StrError":       fi.StrError,
		"fi.Code":           fi.Code,
		"fi.EncodeSockaddr": fi.EncodeSockaddr,
		"fi.DecodeSockaddr": fi.DecodeSockaddr,
		"fi.FormatAddrStr":  fi.FormatAddrStr,
		"fi.ParseAddrStr":   fi.ParseAddrStr,

		"wire.Build":                wire.Build,
		"wire.NewTemplate":          wire.NewTemplate,
		"wire.IPv4Checksum":         wire.IPv4Checksum,
		"wire.PutHdr":               wire.PutHdr,
		"wire.ParseHdr":             wire.ParseHdr,
		"wire.ParseMeta":            wire.ParseMeta,
		"wire.Source":               wire.Source,
		"wire.AppendSourceSockaddr": wire.AppendSourceSockaddr,
		"wire.ParseUDP":             wire.ParseUDP,
		"wire.Checksum16":           wire.Checksum16,
		"wire.PseudoHeaderSum":      wire.PseudoHeaderSum,
		"wire.Stamp":                wire.Stamp,

		"bpf.LoadSpec":     bpf.LoadSpec,
		"bpf.MakeAddr":     bpf.MakeAddr,
		"bpf.ObjectSHA256": bpf.ObjectSHA256,
		"bpf.AVHash":       bpf.AVHash,
		"bpf.AVHashWords":  bpf.AVHashWords,
		"bpf.AVBuckets":    bpf.AVBuckets,
	}
}

// exported is the exported API of the product packages as the source
// declares it: types with methods (package.Type) and functions
// (package.Func), in every file but tests, whatever its build tags.
func exported(t *testing.T) (types, funcs map[string]bool) {
	t.Helper()
	types, funcs = map[string]bool{}, map[string]bool{}
	for _, pkg := range products {
		dir := filepath.Join("..", "..", pkg)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		aliases := map[string]string{} // unexported type -> its exported alias
		recvs := map[string]bool{}     // receiver type names with exported methods
		for _, ent := range ents {
			name := ent.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
					for _, spec := range gd.Specs {
						ts := spec.(*ast.TypeSpec)
						if id, ok := ts.Type.(*ast.Ident); ok && ts.Assign.IsValid() && ts.Name.IsExported() {
							aliases[id.Name] = ts.Name.Name
						}
					}
				}
				fd, ok := d.(*ast.FuncDecl)
				if !ok || !fd.Name.IsExported() {
					continue
				}
				if fd.Recv == nil {
					funcs[pkg+"."+fd.Name.Name] = true
					continue
				}
				recvs[recvName(fd.Recv.List[0].Type)] = true
			}
		}
		for recv := range recvs {
			if alias, ok := aliases[recv]; ok {
				recv = alias
			}
			if ast.IsExported(recv) {
				types[pkg+"."+recv] = true
			}
		}
	}
	return types, funcs
}

// recvName is the name of a method's receiver type: T, *T, T[P], *T[P, Q].
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestSubjectsComplete fails when an exported type with methods is
// missing from subjects, or a type with pointer methods has no nil pointer
// there.
func TestSubjectsComplete(t *testing.T) {
	types, _ := exported(t)
	listed := map[string]bool{}
	for _, s := range subjects {
		rt := reflect.TypeOf(s.zero)
		ptr := rt.Kind() == reflect.Pointer
		if ptr {
			rt = rt.Elem()
		}
		name, _, _ := strings.Cut(rt.Name(), "[")
		key := path.Base(rt.PkgPath()) + "." + name
		if s.name != "" {
			key = s.name
		}
		listed[key] = true
		if ptr != (s.nilPtr != nil) {
			t.Errorf("subject %s: a pointer zero value needs a nil pointer too, and only it", key)
		}
	}
	for _, k := range sortedKeys(types) {
		if !listed[k] {
			t.Errorf("exported type %s has methods and is not in subjects: add its nil pointer and zero value", k)
		}
	}
	for _, k := range sortedKeys(listed) {
		if !types[k] {
			t.Errorf("subject %s is no exported type with methods of %v (renamed? remove it)", k, products)
		}
	}
}

// TestFuncsComplete fails when an exported function of the product
// packages is missing from funcs, or funcs names one that is gone.
func TestFuncsComplete(t *testing.T) {
	_, declared := exported(t)
	listed := funcs()
	for _, k := range sortedKeys(declared) {
		if _, ok := listed[k]; !ok {
			t.Errorf("exported function %s is not in funcs: add it", k)
		}
	}
	for k, fn := range listed {
		if !declared[k] {
			t.Errorf("funcs names %s, which is no exported function of %v", k, products)
		}
		got := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
		if want := "/" + k; !strings.HasSuffix(got, want) {
			t.Errorf("funcs[%q] is %s", k, got)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestZeroPointees gives the functions that take objects pointers to zero
// values (not from their constructors) and attributes out of range: each
// must fail with an error wrapping fi.EINVAL, not panic.
func TestZeroPointees(t *testing.T) {
	zeroDP := func() *loader.Objects { return &loader.Objects{} }
	calls := map[string]func() error{
		"av.Open":          func() error { _, err := av.Open(zeroDP(), &av.Attr{}); return err },
		"av.Destroy":       func() error { return av.Destroy(zeroDP(), "x") },
		"av.DestroyOrphan": func() error { return av.DestroyOrphan(zeroDP(), 1, 1, 0) },
		"av.Slots":         func() error { return av.Slots(zeroDP(), func(uint32, *bpf.AVMeta) {}) },
		"ep.Open":          func() error { _, err := ep.Open(zeroDP(), ep.Attr{}); return err },
		"ep.Prepare":       func() error { _, err := ep.Prepare(zeroDP(), ep.Attr{}); return err },
		"ep.NewDomain":     func() error { _, err := ep.NewDomain(ep.DomainConfig{Queues: -1}); return err },
		"dataplane.NewShareBlock": func() error {
			_, err := dataplane.NewShareBlock(dataplane.ShareConfig{})
			return err
		},
		"dataplane.AttachShareBlock": func() error {
			_, err := dataplane.AttachShareBlock(-1, dataplane.ShareConfig{Queues: 1, Slots: 1, TxFrames: 1, RxFrames: 1, FrameSize: 4096})
			return err
		},
		"ep.Adopt": func() error {
			tx, rx := openCQ(t), openCQ(t)
			_, err := ep.Adopt(ep.HandoverInfo{}, nil, ep.AdoptAttr{Attr: ep.Attr{AV: &av.AV{}, TxCQ: tx, RxCQ: rx}})
			return err
		},
		"stack.Open": func() error { _, err := stack.Open(zeroDP(), stack.Attr{}); return err },
		"dataplane.Open": func() error {
			_, err := dataplane.Open(1, 0, &dataplane.UMEM{}, dataplane.SocketConfig{})
			return err
		},
		"dataplane.AdoptSocket": func() error {
			_, err := dataplane.AdoptSocket(-1, 1, 0, &dataplane.UMEM{}, dataplane.AdoptConfig{RxSize: 64})
			return err
		},
		"cq.Open zero wait set": func() error {
			_, err := cq.Open(cq.Attr{WaitObj: cq.WaitSetObj, WaitSet: &cq.WaitSet{}})
			return err
		},
		"cq.Open size -1":          func() error { _, err := cq.Open(cq.Attr{Size: -1}); return err },
		"cq.Open size too large":   func() error { _, err := cq.Open(cq.Attr{Size: cq.MaxSize + 1}); return err },
		"cq.Open format 99":        func() error { _, err := cq.Open(cq.Attr{Format: 99}); return err },
		"cq.Open wait object 99":   func() error { _, err := cq.Open(cq.Attr{WaitObj: 99}); return err },
		"cq.Open wait cond 99":     func() error { _, err := cq.Open(cq.Attr{WaitCond: 99}); return err },
		"cq.Open threshold -1":     func() error { _, err := cq.Open(cq.Attr{WaitCond: cq.CondThreshold, Threshold: -1}); return err },
		"ep.Endpoint.Rx(3).Recv":   func() error { return (&ep.Endpoint{}).Rx(3).Recv(nil, fi.AddrUnspec, nil) },
		"ep.Endpoint.Rx(-1).TRecv": func() error { return (*ep.Endpoint)(nil).Rx(-1).TRecv(nil, fi.AddrUnspec, 0, 0, nil) },
		"wire.PutHdr short":        func() error { return zeroIsEINVAL(wire.PutHdr(make([]byte, wire.HdrLen-1), wire.Hdr{})) },
		"wire.Frame.Put short":     func() error { return zeroIsEINVAL((&wire.Frame{}).Put(make([]byte, 10))) },
	}
	if av.Exists(zeroDP(), "x") {
		t.Errorf("av.Exists on a zero loader.Objects = true")
	}
	for name, call := range calls {
		out, ok := testutil.CallZero(t, name, reflect.ValueOf(call))
		if !ok {
			continue
		}
		err, _ := out[0].Interface().(error)
		if !errors.Is(err, fi.EINVAL) {
			t.Errorf("%s = %v, want an error wrapping EINVAL", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

// zeroIsEINVAL turns a count that must be 0 into EINVAL (what the caller
// wants to see), or a complaint.
func zeroIsEINVAL(n int) error {
	if n != 0 {
		return errors.New("wrote something")
	}
	return fi.EINVAL
}

func openCQ(t *testing.T) *cq.CQ {
	q, err := cq.Open(cq.Attr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}
