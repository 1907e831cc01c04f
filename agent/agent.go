package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
	"github.com/xdpfab/xdpfab/internal/version"
	"github.com/xdpfab/xdpfab/loader"
)

// Config configures an agent.
type Config struct {
	// Ifaces to attach the XDP program to (at least one).
	Ifaces []string
	// Mode of attachment.
	Mode loader.Mode
	// PinRoot is the bpffs directory of the node's dataplane.
	PinRoot string
	// Socket is the control socket's path; SocketGroup the group (name or
	// number) allowed to use it besides root, with mode 0660. Empty: the
	// process's group, mode 0600.
	Socket      string
	SocketGroup string
	// MetricsAddr serves /metrics over HTTP; empty disables it.
	MetricsAddr string
	// DetachOnExit removes the XDP program when the agent stops; by
	// default it stays attached and traffic keeps flowing.
	DetachOnExit bool
	// BindMode of client endpoints' sockets (default: zero-copy where the
	// driver has it, else copy).
	BindMode dataplane.BindMode
	// Loader sizes (zero: the loader's defaults). They must match the
	// pinned maps' when re-adopting.
	Sizes loader.Config
	// AdminGroup (name or number) may detach and change any AV besides
	// root; empty: root only.
	AdminGroup string
	// ShareGroups are groups (names or numbers) whose members may share
	// a sharing domain ("group:NAME") across uids; without one, a domain
	// is one uid's.
	ShareGroups []string
	// Limits bound every caller's requests and holdings (zero fields:
	// DefaultLimits).
	Limits Limits
	// GCInterval is how often the agent looks for what dead processes left
	// in the shared maps (default 5 s).
	GCInterval time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Agent is a running agent.
type Agent struct {
	cfg Config
	log *slog.Logger
	dp  *loader.Objects

	mu      sync.Mutex
	avs     map[string]*av.AV // named AVs the agent has open
	clients map[*conn]struct{}
	serving sync.WaitGroup // connection goroutines, which release endpoints

	handlers map[string]handler // the dispatch table (server.go), one per ctl operation
	adminGID int                // -1: no admin group
	nconns   int                // open connections, guarded by mu
	usage    map[uint32]*usage  // per uid, guarded by mu
	// inherited: endpoints an earlier run prepared, charged to their
	// owners (inherit.go), by endpoint id; guarded by mu.
	inherited map[uint32]inheritedEP
	local     localState  // same-host channels (localops.go)
	fails     failLimiter // failure lines per uid (logsafe.go)
	neighs    neighState  // neighbour entries made for callers (neighops.go)

	qmu sync.Mutex // serialises endpoint opens' queue arbitration
	avl avLocks    // per AV name and per owner uid: AV changes (avops.go)
	// heads maps the AV tables whose headers the quota checks read
	// (avops.go).
	heads tableHeads
	// lingering is frame memory of closed endpoints still charged (a.mu):
	// linger.go.
	lingering []lingerRec
	lingerSeq uint64
	holds     map[int][]*queueHold // by ifindex, guarded by qmu
	stopping  atomic.Bool

	atts        []*loader.Attachment // guarded by mu
	ln          *net.UnixListener
	http        *http.Server
	metricsAddr string
	restarts    uint64
	lock        *instanceLock
	sockStat    os.FileInfo // the socket file this agent made (close removes only that)
}

// New loads (or re-adopts) the dataplane, attaches it and opens the
// control socket. Run serves it.
func New(cfg Config) (_ *Agent, err error) {
	if len(cfg.Ifaces) == 0 {
		return nil, fmt.Errorf("agent: no interface given (--iface): %w", fi.EINVAL)
	}
	if cfg.PinRoot == "" {
		cfg.PinRoot = filepath.Join(loader.SysFSBPF, "xdpfab")
	}
	if cfg.Socket == "" {
		cfg.Socket = ctl.DefaultSocket
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, avs: map[string]*av.AV{}, clients: map[*conn]struct{}{}}
	a.handlers = a.handlerTable()
	a.usage = map[uint32]*usage{}
	a.holds = map[int][]*queueHold{}
	a.adminGID = -1
	a.cfg.Limits.defaults()
	if err := a.cfg.Limits.validate(); err != nil {
		return nil, err
	}
	if cfg.AdminGroup != "" {
		if a.adminGID, err = lookupGroup(cfg.AdminGroup); err != nil {
			return nil, err
		}
	}
	var st *startState // what was there before this start, once known
	defer func() {
		if err == nil {
			return
		}
		a.close(false)
		if st != nil {
			st.undo(cfg.PinRoot)
		}
		a.lock.release()
	}()
	for _, ifname := range cfg.Ifaces {
		if _, err := net.InterfaceByName(ifname); err != nil {
			return nil, fmt.Errorf("agent: interface %q: %v: %w", ifname, err, fi.ENODEV)
		}
	}
	if a.lock, err = lockInstance(cfg.Socket, cfg.PinRoot); err != nil {
		return nil, err
	}
	if err := checkMountNamespace(cfg.PinRoot); err != nil {
		return nil, err
	}
	// A failed start undoes what it made: links it attached, pins it
	// created, a bpffs it mounted. What an earlier agent left stays.
	before := observeStart(cfg.PinRoot)
	st = &before
	defer func() {
		if err == nil {
			return
		}
		a.mu.Lock()
		for i := 0; i < len(a.atts); i++ {
			if att := a.atts[i]; !att.Adopted {
				att.Detach()
				a.atts = append(a.atts[:i], a.atts[i+1:]...)
				i--
			}
		}
		a.mu.Unlock()
		if !before.mapsExisted && a.dp != nil {
			a.dp.Unpin()
		}
	}()
	sizes := cfg.Sizes
	sizes.PinRoot = cfg.PinRoot
	if a.dp, err = loader.Load(sizes); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := a.startStamps(); err != nil { // stamps.go
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := a.recover(); err != nil {
		return nil, err
	}
	if before.mapsExisted {
		if err := a.inherit(); err != nil { // inherit.go
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	for _, ifname := range cfg.Ifaces {
		att, err := a.dp.Attach(ifname, cfg.Mode)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.atts = append(a.atts, att)
		a.audit(self(), "attach", nil, &auditRec{attrs: []any{"iface", ifname, "ifindex", att.Ifindex, "mode", att.Mode.String(), "adopted", att.Adopted}})
	}
	if err := a.listen(); err != nil {
		return nil, err
	}
	if cfg.MetricsAddr != "" {
		if err := a.serveMetrics(); err != nil {
			return nil, err
		}
	}
	if before.mapsExisted {
		if err := a.countRestart(); err != nil {
			return nil, err
		}
	}
	a.log.Info("agent started", "version", version.Get().Short(), "pin_root", cfg.PinRoot,
		"adopted", before.mapsExisted, "restarts", a.restarts)
	return a, nil
}

// recover reads what a previous agent left: the restart count (avmeta
// slot 0's generation counts the starts that adopted pinned state).
// Anonymous AVs of dead processes are removed by gc. AV capacity that dead
// processes had reserved is not recounted: the reservations of live ones
// cannot be seen from here, and a recount could promise room that is not
// there.
func (a *Agent) recover() error {
	var g bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(uint32(0), &g); err != nil {
		return fmt.Errorf("agent: read dataplane state: %w", err)
	}
	a.restarts = g.Generation
	return nil
}

// countRestart counts a start that adopted the maps an earlier run pinned,
// once everything else of the start succeeded: a failed start, or the
// first start on fresh maps, is not a restart.
func (a *Agent) countRestart() error {
	unlock := a.dp.Lock()
	defer unlock()
	var g bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(uint32(0), &g); err != nil {
		return fmt.Errorf("agent: read dataplane state: %w", err)
	}
	g.Generation++
	if err := a.dp.AVMeta.Put(uint32(0), &g); err != nil {
		return fmt.Errorf("agent: write dataplane state: %w", err)
	}
	a.restarts = g.Generation
	return nil
}

// Run serves until ctx ends, then stops: the control socket closes, client
// endpoints are released, and the XDP link stays unless DetachOnExit.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		a.gcLoop(ctx)
	}()
	stampDone := make(chan struct{})
	go func() {
		defer close(stampDone)
		a.stampLoop(ctx)
	}()
	acceptDone := make(chan error, 1)
	go func() { acceptDone <- a.accept() }()
	// The program is attached and the socket listens (New): ready.
	a.notifyReady()
	wdDone := make(chan struct{})
	go func() {
		defer close(wdDone)
		a.watchdog(ctx)
	}()
	var err error
	select {
	case <-ctx.Done():
		sdNotify("STOPPING=1")
		a.log.Info("stopping", "detach", a.cfg.DetachOnExit)
		a.ln.Close()
		err = <-acceptDone
	case err = <-acceptDone:
	}
	// No new connection and no garbage collection from here on.
	cancel()
	<-gcDone
	<-stampDone
	<-wdDone
	return errors.Join(err, a.close(a.cfg.DetachOnExit))
}

// close releases everything. Connections are closed and their goroutines
// waited for (they release their endpoints) before the maps go.
func (a *Agent) close(detach bool) error {
	a.stopping.Store(true) // endpoints of live processes stay theirs (afterExit)
	var errs []error
	if a.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		errs = append(errs, a.http.Shutdown(ctx))
		cancel()
	}
	if a.ln != nil {
		a.ln.Close() // again after Run: harmless
		if a.sockStat != nil && sameFile(a.cfg.Socket, a.sockStat) {
			os.Remove(a.cfg.Socket)
		}
	}
	a.mu.Lock()
	for c := range a.clients {
		closeConn(c.c) // whatever a client left in it, closed in the background
	}
	a.mu.Unlock()
	a.serving.Wait() // their endpoints are released before the maps go
	a.mu.Lock()
	for name, v := range a.avs {
		errs = append(errs, v.Close())
		delete(a.avs, name)
	}
	a.heads.close()
	atts := a.atts
	a.atts = nil
	a.mu.Unlock()
	for _, att := range atts {
		if detach {
			err := att.Detach()
			a.audit(self(), "detach", err, &auditRec{attrs: []any{"iface", att.Ifname, "reason", "detach on exit"}})
			errs = append(errs, err)
		} else {
			errs = append(errs, att.Close())
		}
	}
	if a.dp != nil {
		errs = append(errs, a.dp.Close())
	}
	a.lock.release()
	return errors.Join(errs...)
}

// listen opens the control socket with the configured permissions.
func (a *Agent) listen() error {
	path := a.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("agent: socket directory: %w", err)
	}
	if err := claimSocketPath(path); err != nil {
		return err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	a.ln = ln
	// Clients send no descriptors: the kernel refuses them for every
	// connection from here on, where it can (closer.go).
	if raw, err := ln.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if !refuseRights(int(fd)) {
				a.log.Debug("the kernel cannot refuse descriptors (SO_PASSRIGHTS, Linux 6.16); those clients send are closed in the background")
			}
		})
	}
	if a.sockStat, err = os.Lstat(path); err != nil {
		return fmt.Errorf("agent: socket %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if g := a.cfg.SocketGroup; g != "" {
		gid, err := lookupGroup(g)
		if err != nil {
			return err
		}
		if err := os.Chown(path, -1, gid); err != nil {
			return fmt.Errorf("agent: socket group %s: %w", g, err)
		}
		// The group's applications read named AVs from the pins directly.
		if err := a.dp.ShareWithGroup(gid); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		mode = 0o660
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("agent: socket mode: %w", err)
	}
	a.log.Info("control socket", "path", path, "group", a.cfg.SocketGroup, "mode", fmt.Sprintf("%#o", uint32(mode)))
	return nil
}

func lookupGroup(g string) (int, error) {
	if gid, err := strconv.Atoi(g); err == nil {
		return gid, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("agent: group %q: %v (create it, e.g. with systemd-sysusers, or pass a number): %w", g, err, fi.EINVAL)
	}
	return strconv.Atoi(grp.Gid)
}

// gcLoop periodically releases what dead processes left behind, and
// reports the failure lines it held back meanwhile.
func (a *Agent) gcLoop(ctx context.Context) {
	every := a.cfg.GCInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.gc()
			a.sweepNeighbors()   // neighops.go
			a.reportSuppressed() // failure lines held back (logsafe.go)
		}
	}
}

// gc releases what dead processes left in the shared maps, whoever opened
// it (through the agent or with the library directly): their anonymous
// AVs, their endpoints' table entries and XSKMAP slots, and the AV capacity
// they held in reserve. A process is named by pid and start time
// (internal/procid), so a reused pid is never taken for the dead owner.
//
// An owner the agent still serves counts as alive, whatever its pid: the
// agent records the connecting process as the owner of what it prepares,
// and a connection can outlive that process (it forked, and exited with
// the child holding the connection). Reclaiming then would free ids and
// socket slots the connection still releases at its end, by then
// another's.
func (a *Agent) gc() {
	a.sweepLingering()
	served := a.served() // before the maps' lock: a.mu is never taken under it
	alive := func(pid uint32, start uint64) bool {
		return served[procid.ID{PID: pid, Start: start}] || procid.ID{PID: pid, Start: start}.Alive()
	}
	err := av.Slots(a.dp, func(id uint32, m *bpf.AVMeta) {
		if m.OwnerPid == 0 || alive(m.OwnerPid, m.OwnerStart) {
			return
		}
		err := av.DestroyOrphan(a.dp, id, m.OwnerPid, m.OwnerStart)
		a.audit(self(), "av.destroy", err, &auditRec{attrs: []any{"av_id", id, "owner_pid", m.OwnerPid, "reason", "owner process gone"}})
	})
	if err != nil {
		a.log.Warn("reclaim AVs", "err", err)
	}
	gone, err := ep.ReclaimDead(a.dp, alive)
	if err != nil {
		a.log.Warn("reclaim endpoints", "err", err)
	}
	for _, r := range gone {
		a.audit(self(), "ep.close", nil, &auditRec{attrs: []any{"id", r.ID, "local", r.Local, "owner_pid", r.OwnerPID, "reason", "owner process gone"}})
	}
	a.dropInherited() // inherit.go
	if freed, err := a.dp.ReclaimPools(alive); err != nil {
		a.log.Warn("reclaim AV capacity", "err", err)
	} else if freed > 0 {
		a.log.Info("gave back the AV capacity dead processes held", "entries", freed)
	}
}

// served returns the processes the agent's connections came from.
func (a *Agent) served() map[procid.ID]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[procid.ID]bool, len(a.clients))
	for c := range a.clients {
		m[procid.ID{PID: uint32(c.who.pid), Start: c.who.start}] = true
	}
	return m
}

// buildVersion is the agent's module version and commit as the Go
// toolchain recorded them ("(devel)" for a build from a work tree).
func buildVersion() string {
	v := version.Get()
	return v.Module + " " + v.Short()
}
