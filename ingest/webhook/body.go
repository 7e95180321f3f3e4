package webhook

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/internal/httpserve"
)

// bodyBudget is the bytes the webhook bodies in hand may hold at once
// (Config.BodyBudget): every chunk a body is read into, and the
// body put together, are taken from it before they are allocated and
// given back when they are freed.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
	gauge prometheus.Gauge
}

func newBodyBudget(limit int64, gauge, budget prometheus.Gauge) *bodyBudget {
	budget.Set(float64(limit))
	return &bodyBudget{limit: limit, gauge: gauge}
}

// take reserves n bytes, reporting whether they were left.
func (b *bodyBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			b.gauge.Add(float64(n))
			return true
		}
	}
}

// give returns n bytes taken.
func (b *bodyBudget) give(n int64) {
	b.used.Add(-n)
	b.gauge.Sub(float64(n))
}

// left is what is not taken now.
func (b *bodyBudget) left() int64 { return b.limit - b.used.Load() }

// The chunks bodies are read into, reused from request to request: a
// refused body leaves no garbage behind for the collector, so the memory
// a flood of them costs stays the budget's.
var (
	firstChunks = sync.Pool{New: func() any { b := make([]byte, webhookFirstChunk); return &b }}
	bodyChunks  = sync.Pool{New: func() any { b := make([]byte, webhookChunk); return &b }}
)

// bodyNeed is the most of the budget a body of n bytes takes at once:
// its chunks, and the body put together.
func bodyNeed(n int64) int64 {
	chunks := int64(webhookFirstChunk)
	if n > webhookFirstChunk {
		chunks += (n - webhookFirstChunk + webhookChunk - 1) / webhookChunk * webhookChunk
	}
	return chunks + n
}

// bodyRefusal is why a body was not read to its end: the answer's code,
// its text, and the reason label it counts under ("" for none counted).
type bodyRefusal struct {
	code   int
	why    string
	reason string
}

// readBody reads the body of r (at most max bytes) under the budget and
// the pace: into chunks of the pools, each taken from the budget before it
// is used, then put together into one slice, also taken from the budget.
// It returns the body and the function that gives its bytes back (call it
// once the request is answered), or the refusal to answer with. A body
// whose declared length does not fit in what the budget has left is
// refused before a byte of it is read.
func (s *webhookSource) readBody(w http.ResponseWriter, r *http.Request, max int) ([]byte, func(), *bodyRefusal) {
	budget := s.budget
	spent := &bodyRefusal{http.StatusServiceUnavailable, "the webhook body budget is spent; retry later", "budget"}
	if r.ContentLength > 0 && bodyNeed(r.ContentLength) > budget.left() {
		return nil, nil, spent
	}
	a := s.cfg.adm()
	body := io.LimitReader(httpserve.PacedBody(w, r, httpserve.Pace{Grace: a.BodyGrace, Rate: a.MinBodyRate,
		Stall: a.BodyStall, Max: s.cfg.ReadTimeout}), int64(max)+1)
	var chunks []*[]byte
	var lens []int
	var held int64
	free := func() {
		for i, c := range chunks {
			if i == 0 {
				firstChunks.Put(c)
			} else {
				bodyChunks.Put(c)
			}
		}
		budget.give(held)
	}
	total := 0
	for {
		size, pool := int64(webhookChunk), &bodyChunks
		if len(chunks) == 0 {
			size, pool = webhookFirstChunk, &firstChunks
		}
		if !budget.take(size) {
			free()
			return nil, nil, spent
		}
		held += size
		c := pool.Get().(*[]byte)
		chunks = append(chunks, c)
		n, err := io.ReadFull(body, (*c)[:size])
		lens = append(lens, n)
		total += n
		if total > max {
			free()
			return nil, nil, &bodyRefusal{http.StatusRequestEntityTooLarge, "body larger than max_body", ""}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || (err == nil && int64(total) == r.ContentLength) {
			break
		}
		if err != nil {
			free()
			for reason, e := range map[string]error{"too_slow": httpserve.ErrTooSlow, "stalled": httpserve.ErrStalled, "too_long": httpserve.ErrTooLong} {
				if errors.Is(err, e) {
					return nil, nil, &bodyRefusal{http.StatusRequestTimeout, "the body came too slowly", reason}
				}
			}
			return nil, nil, &bodyRefusal{http.StatusBadRequest, "cannot read the body", ""}
		}
	}
	if !budget.take(int64(total)) {
		free()
		return nil, nil, spent
	}
	out := make([]byte, 0, total)
	for i, c := range chunks {
		out = append(out, (*c)[:lens[i]]...)
	}
	free()
	return out, func() { budget.give(int64(total)) }, nil
}
