package outbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// flowControl keeps each destination's limits in one dispatcher. A
// message whose destination has no budget now is handed back (pending,
// its attempt refunded, due when the budget should have room) rather than
// waited for: a worker that waited would be a worker the other
// destinations lack, and one slow destination would starve the table.
// Only a wait shorter than flowSleepMax is slept, cheaper than a write
// and a claim.
//
// The limits hold over all the table's dispatchers: each takes an even
// share of the rate and the burst (at least one), and of the concurrency
// by its rank among the live dispatchers (at least one: see apply), so
// the shares add up to the limit. The live dispatchers are read from the dispatchers table before
// a limited message is admitted when the last read is older than a
// second: once a second while such messages flow, never while none do,
// and fresh when they start again.
type flowControl struct {
	dests Destinations
	owner string
	now   func() time.Time
	// hungAfter is how long a publish counts against its destination's
	// concurrency at most: past its timeout and as long again, it is
	// hung (a sink that ignores its context), given up by the lease
	// mode, and must not take a slot for ever (under shard leases the
	// dispatcher's own shards would then wait for good).
	hungAfter time.Duration
	// pooled says a message handed back may be claimed by any dispatcher
	// (row leases): the queue it joins is paced at the whole limit, which
	// the dispatchers send together. Under shard leases and cursors it
	// comes back to this dispatcher's shards, paced at its share.
	pooled bool
	// live lists the owners of the live dispatchers.
	list func(context.Context) ([]string, error)

	// refreshMu makes one worker read the live dispatchers while the
	// others wait for its answer; read is when it last did (Unix
	// nanoseconds), looked at without the lock by every admission.
	refreshMu sync.Mutex
	read      atomic.Int64
	// settled is until when (Unix nanoseconds) a run just started admits
	// nothing limited (see flowSettle); 0 once past.
	settled atomic.Int64

	// shards, when set (shard leases, snapshot cursors), reports how
	// many shards this dispatcher holds of the table's.
	shards func() (held, total int)
	// split keeps a breaker per destination (see splitBreaker); anyOpen
	// says one is not closed, read without the lock by every admission.
	split   bool
	anyOpen atomic.Bool

	mu    sync.Mutex
	gates map[string]*gate
	share share // this dispatcher's place among the live ones
}

// gate is one destination's budget in this dispatcher.
type gate struct {
	dest     Destination
	lim      *rate.Limiter // nil without a rate
	capShare int           // publishes in flight allowed here
	// flights are when the publishes in flight here started, by a
	// number of their own.
	flights map[uint64]time.Time
	seq     uint64
	// held are when the messages handed back and not yet due are due,
	// in the order they were handed back: the queue a message handed
	// back joins, each one an interval after the one before, so that
	// they come back at the pace the budget frees, not all at once. A
	// message handed back again joins the queue's end as it is then,
	// never a schedule that only grows.
	held []time.Time
	// avg is the running average publish duration, for the
	// concurrency's schedule.
	avg time.Duration
	// sleepers are the workers sleeping for one of its tokens.
	sleepers int
	// brk is its breaker (split breakers only: see flowbreaker.go).
	brk breaker
	// handedBack counts the messages handed back, heldFor the delays
	// they were given.
	handedBack int64
	heldFor    time.Duration
}

const (
	// flowSleepMax is the longest wait for a rate's token that a worker
	// sleeps instead of handing the message back.
	flowSleepMax = 50 * time.Millisecond
	// holdMin and holdMax bound a hand-back's delay.
	holdMin = 10 * time.Millisecond
	holdMax = 15 * time.Minute
	// concurrencyHoldMax bounds the delay of a message handed back for
	// the concurrency, scheduled on the publishes' average duration: a
	// receiver that hung for a while (every publish a timeout) must not
	// leave its backlog due minutes after it answers again. A rate's
	// schedule holds: the rate does not change with the receiver.
	concurrencyHoldMax = 10 * time.Second
	// flowRefreshEvery is how old the list of live dispatchers may be
	// when a limited message is admitted.
	flowRefreshEvery = time.Second
	// flowWaitMax is the longest wait for a token a worker may sleep as
	// one of the destination's flowSleepers.
	flowWaitMax  = time.Second
	flowSleepers = 2
	// flowSettle is how long after its start a dispatcher admits no
	// limited message: dispatchers started together (a deploy, a restart
	// with a backlog) each report themselves at their start, and each
	// must see the others before it takes its share, not the whole limit.
	flowSettle = 250 * time.Millisecond
)

func newFlowControl(dests Destinations, owner string, publishTimeout time.Duration, pooled bool, now func() time.Time, list func(context.Context) ([]string, error)) *flowControl {
	return &flowControl{dests: dests, owner: owner, hungAfter: 2 * publishTimeout, pooled: pooled, now: now, list: list, gates: map[string]*gate{}, share: share{live: 1}}
}

// pace is how many shares the queue of hand-backs is paced at.
func (f *flowControl) pace() time.Duration {
	if f.pooled {
		return time.Duration(f.share.live)
	}
	return 1
}

// starting is called as a run starts: its first limited admissions wait
// for flowSettle, then read the live dispatchers.
func (f *flowControl) starting() {
	f.settled.Store(f.now().Add(flowSettle).UnixNano())
	f.read.Store(0)
}

// settle sleeps out the start of a run (see flowSettle).
func (f *flowControl) settle(ctx context.Context) {
	until := f.settled.Load()
	if until == 0 {
		return
	}
	left := time.Duration(until - f.now().UnixNano())
	if left <= 0 {
		f.settled.CompareAndSwap(until, 0)
		return
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// refresh reads the live dispatchers when the last read is older than
// flowRefreshEvery; on an error the shares stay as they were.
func (f *flowControl) refresh(ctx context.Context) {
	fresh := func() bool { return f.now().UnixNano()-f.read.Load() < int64(flowRefreshEvery) }
	if fresh() {
		return
	}
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	if fresh() {
		return
	}
	owners, err := f.list(ctx)
	f.read.Store(f.now().UnixNano())
	if err == nil {
		f.setLive(owners)
	}
}

// admit is admitWithin sleeping no wait longer than flowSleepMax.
func (f *flowControl) admit(ctx context.Context, msg *Message) (done func(time.Duration), hold time.Duration, why string) {
	return f.admitWithin(ctx, msg, flowSleepMax)
}

// admitWithin asks to publish msg now. With no hold, the publish may
// start, and done(took) must be called when it ended; otherwise msg is to
// be handed back for hold, and why says which limit held it. A wait for
// the rate's next token up to maxSleep (the lease the message can spare)
// is slept by up to flowSleepers workers per destination at a time: each
// token is then used when it comes, not when a message handed back comes
// round again, while the other workers go on with other destinations.
func (f *flowControl) admitWithin(ctx context.Context, msg *Message, maxSleep time.Duration) (done func(time.Duration), hold time.Duration, why string) {
	dest := f.dests.Destination(msg)
	limited := dest.Limited()
	if !limited && !f.anyOpen.Load() {
		return func(time.Duration) {}, 0, ""
	}
	if limited {
		f.settle(ctx)
		f.refresh(ctx)
	}
	f.mu.Lock()
	g := f.gates[dest.Name]
	if limited {
		g = f.gateLocked(dest)
	}
	if g != nil {
		if hold, held := g.unavailable(f.hungAfter); held {
			f.mu.Unlock()
			return nil, hold, unavailableWhy(dest.Name)
		}
	}
	if !limited {
		f.mu.Unlock()
		return func(time.Duration) {}, 0, ""
	}
	now := f.now()
	if dest.Concurrency > 0 && g.inFlightAt(now, f.hungAfter) >= g.capShare {
		hold = min(g.schedule(now, g.avg, g.concurrencyInterval()/f.pace()), concurrencyHoldMax)
		g.count(hold)
		f.mu.Unlock()
		return nil, hold, fmt.Sprintf("held back: destination %q has its %d publishes in flight", dest.Name, dest.Concurrency)
	}
	var wait time.Duration
	sleeper := false
	if g.lim != nil {
		r := g.lim.ReserveN(now, 1)
		wait = r.DelayFrom(now)
		sleeper = wait > flowSleepMax && wait <= min(maxSleep, flowWaitMax) && g.sleepers < flowSleepers
		if wait > flowSleepMax && !sleeper {
			r.CancelAt(now)
			hold = g.schedule(now, wait, time.Duration(float64(time.Second)/float64(g.lim.Limit()))/f.pace())
			g.count(hold)
			f.mu.Unlock()
			return nil, hold, fmt.Sprintf("held back: destination %q is at its rate of %g a second", dest.Name, dest.Rate)
		}
	}
	if sleeper {
		g.sleepers++
	}
	g.seq++
	id := g.seq
	if g.flights == nil {
		g.flights = map[uint64]time.Time{}
	}
	g.flights[id] = now
	f.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if sleeper {
		f.mu.Lock()
		g.sleepers--
		f.mu.Unlock()
	}
	return func(took time.Duration) {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(g.flights, id)
		if g.avg == 0 {
			g.avg = took
		} else {
			g.avg += (took - g.avg) / 8
		}
	}, 0, ""
}

// count records a message handed back for hold.
func (g *gate) count(hold time.Duration) {
	g.handedBack++
	g.heldFor += hold
}

// inFlightAt counts the publishes in flight that are not hung.
func (g *gate) inFlightAt(now time.Time, hungAfter time.Duration) int {
	n := 0
	for _, started := range g.flights {
		if now.Sub(started) < hungAfter {
			n++
		}
	}
	return n
}

// gateLocked is dest's gate, made or brought to dest's limits.
func (f *flowControl) gateLocked(dest Destination) *gate {
	g := f.gates[dest.Name]
	if g == nil {
		g = &gate{brk: breaker{now: f.now}}
		f.gates[dest.Name] = g
	}
	if g.dest != dest {
		g.dest = dest
		g.apply(f.share)
	}
	return g
}

// share is a dispatcher's place among the table's: its rank among the
// live dispatchers and their number, and, under shard leases and cursors,
// the shards it holds of the table's.
type share struct {
	rank, live  int
	held, total int
}

// byShards reports whether the share is the dispatcher's shards': the
// messages it may send are its shards', so its share of a limit is theirs
// (a dispatcher holding every shard while the others start has the whole
// limit, not a third of it).
func (s share) byShards() bool { return s.held > 0 && s.total > 0 }

// apply sets the gate's share of its destination's limits. Every
// dispatcher keeps a publish at a time at least, even past the
// concurrency (more dispatchers than it allows): under shard leases the
// messages of a dispatcher's shards are its alone to send, and a
// dispatcher without a share would hold them for ever.
func (g *gate) apply(s share) {
	frac := 1 / float64(s.live)
	if s.byShards() {
		frac = float64(s.held) / float64(s.total)
	}
	if c := g.dest.Concurrency; c > 0 {
		if s.byShards() {
			g.capShare = c * s.held / s.total
		} else {
			g.capShare = c / s.live
			if s.rank < c%s.live {
				g.capShare++
			}
		}
		g.capShare = max(g.capShare, 1)
	}
	if g.dest.Rate == 0 {
		g.lim = nil
		return
	}
	r := rate.Limit(g.dest.Rate * frac)
	b := max(int(float64(max(g.dest.Burst, 1))*frac), 1)
	if g.lim == nil {
		g.lim = rate.NewLimiter(r, b)
	} else {
		g.lim.SetLimit(r)
		g.lim.SetBurst(b)
	}
}

// concurrencyInterval is how far apart messages held for the concurrency
// are scheduled: a publish's average duration shared by the slots.
func (g *gate) concurrencyInterval() time.Duration {
	return max(g.avg, holdMin) / time.Duration(max(g.capShare, 1))
}

// schedule is the delay of one more message handed back: after wait at
// the soonest, and an interval for each message handed back before it
// that is not due yet.
func (g *gate) schedule(now time.Time, wait, interval time.Duration) time.Duration {
	i := 0
	for i < len(g.held) && !g.held[i].After(now) {
		i++
	}
	g.held = g.held[i:]
	hold := min(max(wait, holdMin)+time.Duration(len(g.held))*interval, holdMax)
	g.held = append(g.held, now.Add(hold))
	return hold
}

// setLive applies the dispatchers seen live (owners, in any order; this
// one counted whether listed or not), and the shards this one holds, to
// every gate.
func (f *flowControl) setLive(owners []string) {
	others := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == f.owner })
	all := append(others, f.owner)
	slices.Sort(all)
	next := share{rank: slices.Index(all, f.owner), live: len(all)}
	if f.shards != nil {
		next.held, next.total = f.shards()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if next == f.share {
		return
	}
	f.share = next
	for _, g := range f.gates {
		g.apply(next)
	}
}

// shares reports this dispatcher's rank among the live ones and their
// number.
func (f *flowControl) shares() (rank, live int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.share.rank, f.share.live
}

// liveOwners lists the owners of the table's live dispatchers.
func (d *Dispatcher) liveOwners(ctx context.Context) ([]string, error) {
	ds, err := d.store.Dispatchers(ctx, d.pool)
	if err != nil {
		return nil, err
	}
	owners := make([]string, len(ds))
	for i, x := range ds {
		owners[i] = x.Owner
	}
	return owners, nil
}

// DestinationState is what a dispatcher holds of one destination's limits
// ([Dispatcher.Destinations]): its share of them, what it has in flight
// and what it handed back for want of budget.
type DestinationState struct {
	Destination
	// RateShare and BurstShare are this dispatcher's share of the rate
	// (messages a second) and the burst; ConcurrencyShare its share of
	// the publishes in flight. Zero where the destination has no such
	// limit.
	RateShare        float64
	BurstShare       int
	ConcurrencyShare int
	// InFlight is how many publishes to it are in flight here now (hung
	// ones past twice the publish timeout left out).
	InFlight int
	// Waiting is how many messages this dispatcher handed back that are
	// not due yet.
	Waiting int
	// HandedBack counts the messages handed back since the start, and
	// HeldFor adds up the delays they were given.
	HandedBack int64
	HeldFor    time.Duration
	// Live is how many dispatchers of the table share the limits, as last
	// read.
	Live int
	// Unavailable is whether its sink said it is unavailable and its
	// messages are held back until a probe answers (a breaker per
	// destination, with more than one destination).
	Unavailable bool
}

// Destinations reports the limited destinations this dispatcher has sent
// to or held back, by name; nil without Config.Flow.
func (d *Dispatcher) Destinations() []DestinationState {
	if d.flow == nil {
		return nil
	}
	return d.flow.states()
}

func (f *flowControl) states() []DestinationState {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	out := make([]DestinationState, 0, len(f.gates))
	for _, g := range f.gates {
		s := DestinationState{
			Destination: g.dest, ConcurrencyShare: g.capShare, InFlight: g.inFlightAt(now, f.hungAfter),
			HandedBack: g.handedBack, HeldFor: g.heldFor, Live: f.share.live, Unavailable: !g.brk.closed(),
		}
		for _, at := range g.held {
			if at.After(now) {
				s.Waiting++
			}
		}
		if g.lim != nil {
			s.RateShare, s.BurstShare = float64(g.lim.Limit()), g.lim.Burst()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b DestinationState) int { return strings.Compare(a.Name, b.Name) })
	return out
}
