package handlers

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Middleware wraps a Handler with behaviour of its own (recovery, metrics,
// logging, tracing), as Watermill's router does: it returns a Handler that
// does its part and calls next. Transactional handlers go through the same
// chain: their transaction is in the context (TxFromContext).
type Middleware func(next Handler) Handler

// Chain applies middleware to h, the first one outermost: Chain(h, a, b)
// calls a, which calls b, which calls h.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

type txKey struct{}

// ContextWithTx returns ctx carrying tx, the transaction a transactional
// handler runs in. The engine calls it; middleware may read it.
func ContextWithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the transaction of the transactional handler being
// run, if any.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok && tx != nil
}

// txAdapter runs a TxHandler as a Handler, taking its transaction from the
// context.
type txAdapter struct{ h TxHandler }

func (a txAdapter) Handle(ctx context.Context, ev *Event) error {
	tx, ok := TxFromContext(ctx)
	if !ok {
		return Permanent(errNoTx)
	}
	return a.h.HandleTx(ctx, tx, ev)
}

var errNoTx = errorString("transactional handler called without a transaction in its context")

type errorString string

func (e errorString) Error() string { return string(e) }
