package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// Audit lines: every change of state made through the agent is logged
// once, at INFO when it succeeded and WARN when it was refused or failed,
// with the message "audit" and these attributes first:
//
//	op      the operation: av.create, av.insert, av.insertsym, av.remove,
//	        av.set-user-id, av.destroy, ep.open, ep.close, detach, attach,
//	        connect (a refused connection)
//	uid     the caller's uid, pid its pid (SO_PEERCRED); the agent's own
//	        for what it does by itself (attach at start, reclaiming what
//	        dead processes left: by=agent)
//	result  ok, partial (some addresses of an insert failed) or the errno
//	        name (EACCES, EINVAL, ...), with err the message
//
// followed by what the operation was about, as counts rather than every
// address (av, addrs, inserted, failed, iface, local, id, ...). Enum values
// are logged by name. A string the client chose is logged cut to
// ctl.MaxQuoted bytes and escaped (clean), err to ctl.MaxErrorText.
// Refusals and failures are written within the caller's uid's share of
// failure lines (logFailure): beyond it they are counted, and the count
// is reported as suppressed, on the uid's next line written or in a
// "failure lines suppressed" line.

// auditRec collects the attributes one operation reports.
type auditRec struct {
	attrs   []any
	partial fi.Errno // first failure of an insert that otherwise went in
}

func (r *auditRec) add(kv ...any) { r.attrs = append(r.attrs, kv...) }

// audit writes one audit line. A refusal or failure that a client caused
// is written within its uid's share of failure lines (logFailure): a
// client flooding the agent with requests it refuses gets a few lines a
// second and a count of the rest, and every other caller's lines as
// before. Changes that took place are always written.
func (a *Agent) audit(who caller, op string, err error, rec *auditRec) {
	attrs := []any{"op", op, "uid", who.uid, "pid", who.pid}
	level := slog.LevelInfo
	switch {
	case err != nil:
		level = slog.LevelWarn
		attrs = append(attrs, "result", fi.Code(err).Name(), "err", ctl.ClipText(err.Error(), ctl.MaxErrorText))
	case rec != nil && rec.partial != 0:
		level = slog.LevelWarn
		attrs = append(attrs, "result", "partial", "first_errno", rec.partial.Name())
	default:
		attrs = append(attrs, "result", "ok")
	}
	if who.self {
		attrs = append(attrs, "by", "agent")
	}
	if rec != nil {
		attrs = append(attrs, rec.attrs...)
	}
	if err != nil {
		a.logFailure(who, "audit", attrs...)
		return
	}
	a.log.Log(context.Background(), level, "audit", attrs...)
}

// self is the agent as the caller of what it does by itself.
func self() caller {
	return caller{uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), pid: int32(os.Getpid()), self: true}
}

// audited makes an audited handler of f for op: the arguments are decoded
// strictly into op's argument type, f runs, and one audit line reports
// the outcome, a refusal or an undecodable request included.
func audited[A, R any](a *Agent, op ctl.Op[A, R], f func(cn *conn, args A, rec *auditRec) (R, []int, error)) (string, handler) {
	return op.Name(), func(cn *conn, raw json.RawMessage) (any, []int, error) {
		rec := &auditRec{}
		var args A
		if err := ctl.Decode(raw, &args); err != nil {
			err = fmt.Errorf("%s: arguments: %w", op.Name(), err)
			a.audit(cn.who, op.Name(), err, rec)
			return nil, nil, err
		}
		r, fds, err := f(cn, args, rec)
		a.audit(cn.who, op.Name(), err, rec)
		return r, fds, err
	}
}
