package console

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Job states.
const (
	JobRunning   = "running"
	JobDone      = "done"
	JobFailed    = "failed"
	JobCancelled = "cancelled"
)

// jobsKept is how many finished jobs the registry remembers.
const jobsKept = 100

// MaxRunningJobs is how many bulk actions may run at once: each holds a
// connection and counts and moves rows, so a client starting them in a
// loop must not take every connection of the pool.
const MaxRunningJobs = 4

// errTooManyJobs refuses a job while MaxRunningJobs run.
var errTooManyJobs = errors.New("too many jobs running")

// JobView is a tracked job as the API shows it.
type JobView struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"` // dead_retry, dead_skip, replay
	Table      string     `json:"table"`
	Name       string     `json:"name,omitempty"` // the replay's name
	Actor      string     `json:"actor"`
	Filter     []string   `json:"filter"`
	State      string     `json:"state"`
	Done       int64      `json:"done"`
	Total      int64      `json:"total"` // the rows the job is pinned to (with include_newer, those matching when it started)
	Rate       float64    `json:"rate,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

type job struct {
	mu     sync.Mutex
	view   JobView
	done   atomic.Int64
	cancel context.CancelFunc
}

func (j *job) snapshot() JobView {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := j.view
	v.Done = j.done.Load()
	return v
}

// jobs is the registry of bulk actions, running and recent.
type jobs struct {
	mu   sync.Mutex
	seq  int
	list []*job
	wg   sync.WaitGroup
}

func newJobs() *jobs { return &jobs{} }

// progress records the running count of a job.
func (j *job) progress(done int64) { j.done.Store(done) }

// setTotal records how many rows the job expects to touch.
func (j *job) setTotal(n int64) {
	j.mu.Lock()
	j.view.Total = n
	j.mu.Unlock()
}

// start runs fn in the background as a tracked job, detached from the
// request but cancelled by cancel or by the server's shutdown. fn reports
// progress through the job and returns the final count.
func (js *jobs) start(ctx context.Context, v JobView, fn func(ctx context.Context, j *job) (int64, error)) (JobView, error) {
	js.mu.Lock()
	running := 0
	for _, j := range js.list {
		if j.snapshot().State == JobRunning {
			running++
		}
	}
	if running >= MaxRunningJobs {
		js.mu.Unlock()
		return JobView{}, errTooManyJobs
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	js.seq++
	v.ID = strconv.Itoa(js.seq)
	v.State, v.StartedAt = JobRunning, time.Now().UTC()
	j := &job{view: v, cancel: cancel}
	js.list = append(js.list, j)
	js.pruneLocked()
	js.mu.Unlock()
	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		defer cancel()
		n, err := fn(ctx, j)
		j.done.Store(n)
		j.mu.Lock()
		defer j.mu.Unlock()
		now := time.Now().UTC()
		j.view.FinishedAt = &now
		switch {
		case err == nil:
			j.view.State = JobDone
		case ctx.Err() != nil:
			j.view.State = JobCancelled
		default:
			j.view.State, j.view.Error = JobFailed, err.Error()
		}
	}()
	return j.snapshot(), nil
}

// pruneLocked forgets the oldest finished jobs beyond jobsKept.
func (js *jobs) pruneLocked() {
	for len(js.list) > jobsKept {
		i := slices.IndexFunc(js.list, func(j *job) bool { return j.snapshot().State != JobRunning })
		if i < 0 {
			return
		}
		js.list = slices.Delete(js.list, i, i+1)
	}
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, j := range js.list {
		if j.view.ID == id {
			return j
		}
	}
	return nil
}

// all returns the jobs, newest first.
func (js *jobs) all() []JobView {
	js.mu.Lock()
	defer js.mu.Unlock()
	out := make([]JobView, 0, len(js.list))
	for i := len(js.list) - 1; i >= 0; i-- {
		out = append(out, js.list[i].snapshot())
	}
	return out
}

func (js *jobs) cancelAll() {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, j := range js.list {
		j.cancel()
	}
}

func (js *jobs) wait() { js.wg.Wait() }
