package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/xdpfab/xdpfab/ctl"
)

// What a client sends reaches the log only through clean (every string it
// chose: names, addresses, operations, its program's name), and the lines
// a client can make the agent write at will, refusals and failures, only
// through failLimiter: a client sending hostile requests as fast as it can
// must not fill the disk or bury other callers' audit lines.

// clean is ctl.Clean: a client's string cut to ctl.MaxQuoted bytes and
// escaped, for a log attribute. A name that passed validation comes out as
// it went in.
func clean(s string) string { return ctl.Clean(s) }

// quote is ctl.Quote: clean in double quotes, for an error message.
func quote(s string) string { return ctl.Quote(s) }

// unknownUID stands for a connection whose credentials could not be read:
// (uid_t)-1 is nobody's uid.
const unknownUID = ^uint32(0)

// The failure lines of one uid: failBurst at once, then failRate a second.
const (
	failRate  = 5
	failBurst = 50
)

// failLimiter bounds the failure lines written for each uid; the lines it
// holds back are counted, and reported with the uid's next line that is
// written ("suppressed": how many before it were not) or by flush.
type failLimiter struct {
	mu sync.Mutex
	m  map[uint32]*failBucket
}

type failBucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// allow reports whether a failure line of uid may be written now, and how
// many of uid's were held back since its last one.
func (l *failLimiter) allow(uid uint32, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint32]*failBucket{}
	}
	b := l.m[uid]
	if b == nil {
		b = &failBucket{tokens: failBurst, last: now}
		l.m[uid] = b
	}
	b.tokens = min(failBurst, b.tokens+now.Sub(b.last).Seconds()*failRate)
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// flush returns, per uid, the lines held back and not yet reported, and
// forgets the uids whose budget is whole again.
func (l *failLimiter) flush(now time.Time) map[uint32]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uint32]int{}
	for uid, b := range l.m {
		if b.suppressed > 0 {
			out[uid] = b.suppressed
			b.suppressed = 0
		}
		if min(failBurst, b.tokens+now.Sub(b.last).Seconds()*failRate) >= failBurst {
			delete(l.m, uid)
		}
	}
	return out
}

// logFailure writes a failure line that who's requests caused, at WARN,
// unless who has written its share of them lately (failLimiter).
func (a *Agent) logFailure(who caller, msg string, attrs ...any) {
	if !who.self {
		ok, held := a.fails.allow(who.uid, time.Now())
		if !ok {
			return
		}
		if held > 0 {
			attrs = append(attrs, "suppressed", held)
		}
	}
	a.log.Log(context.Background(), slog.LevelWarn, msg, attrs...)
}

// reportSuppressed writes one line per uid whose failure lines were held
// back since they were last reported: the count is never lost, even when
// the uid writes no line after its flood.
func (a *Agent) reportSuppressed() {
	for uid, n := range a.fails.flush(time.Now()) {
		a.log.Warn("failure lines suppressed", "uid", uid, "suppressed", n, "rate", failRate, "burst", failBurst)
	}
}
