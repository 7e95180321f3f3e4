package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderBatchSize carries the number of events in a batch POST (an http
// route with batch:).
const HeaderBatchSize = "Inbox-Batch-Size"

// maxBatchResponse is how much of a batch response's body is read for its
// per-row results.
const maxBatchResponse = 16 << 20

// batchElement is one event of a batch POST's JSON array (an http route
// with batch:). Payload holds the payload itself when it is JSON, else
// PayloadBase64 holds it in standard base64; Key is the key when it is
// valid UTF-8 (KeyBase64 otherwise; both empty without a key).
type batchElement struct {
	ID             string            `json:"id"`
	Source         string            `json:"source"`
	IdempotencyKey string            `json:"idempotency_key"`
	Type           string            `json:"type"`
	Key            *string           `json:"key,omitempty"`
	KeyBase64      []byte            `json:"key_base64,omitempty"`
	Headers        map[string]string `json:"headers"`
	Attempt        int               `json:"attempt"`
	Payload        json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64  []byte            `json:"payload_base64,omitempty"`
}

// batchResponse is what the receiver of a batch POST may answer, with a
// 2xx, to give rows outcomes of their own; a 2xx without it (an empty body,
// or any body that is not such an object) means every row is processed.
type batchResponse struct {
	// Results are rows' outcomes; rows without one are processed.
	Results []batchResult `json:"results"`
}

// batchResult is one row's outcome in a batchResponse. The row is the one
// whose element has this ID (and Source, when given: a batch may hold two
// sources' events of one id).
type batchResult struct {
	ID     string `json:"id"`
	Source string `json:"source,omitempty"`
	// Status is "processed", "retry" (retried with backoff, or after
	// RetryAfter) or "dead" (dead at once).
	Status string `json:"status"`
	// Error says why, for last_error.
	Error string `json:"error,omitempty"`
	// RetryAfter is the delay a retry asks for, in seconds (0: the route's
	// backoff).
	RetryAfter float64 `json:"retry_after,omitempty"`
}

// The values of batchResult.Status (docs/routes.md#batch-routes).
const (
	batchProcessed = "processed"
	batchRetry     = "retry"
	batchDead      = "dead"
)

// httpBatch is the http handler's batch form (an http route with batch:):
// it POSTs each batch to the route's URL as one JSON array of batchElement, with Content-Type application/json and
// HeaderBatchSize. A 2xx makes every row processed unless its body is a
// batchResponse, whose results give rows their own outcomes; any other
// answer, or none, is the whole batch's, classified as NewHTTP does for one
// event (so every row is retried; a batch of one takes the outcome
// itself).
type httpBatch httpHandler

// batch returns h's batch form.
func (h *httpHandler) batch() TxBatchHandler { return plainBatch{(*httpBatch)(h)} }

// HandleBatch POSTs evs as one JSON array; see httpBatch.
func (b *httpBatch) HandleBatch(ctx context.Context, evs []*Event) error {
	h := (*httpHandler)(b)
	body, err := json.Marshal(batchElements(evs, h.bareEventID))
	if err != nil {
		return Permanent(fmt.Errorf("http: encode batch: %w", err))
	}
	reqCtx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Permanent(fmt.Errorf("http: build request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "inboxd")
	req.Header.Set(HeaderBatchSize, strconv.Itoa(len(evs)))
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := h.client.Do(req)
	if err != nil {
		return h.requestError(ctx, reqCtx, err)
	}
	defer drainClose(resp.Body)
	if err := h.responseError(resp); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBatchResponse))
	if err != nil {
		return fmt.Errorf("http POST %s: read the batch's results: %w", h.target, err)
	}
	return batchResults(evs, data, h.maxRetryAfter)
}

// batchElements is evs as a batch POST's elements.
func batchElements(evs []*Event, bareEventID bool) []batchElement {
	els := make([]batchElement, len(evs))
	for i, ev := range evs {
		el := batchElement{ID: ev.EventID, Source: ev.Source, IdempotencyKey: IdempotencyKeyFor(ev),
			Type: ev.EventType, Headers: ev.Headers, Attempt: ev.Attempt}
		if bareEventID {
			el.IdempotencyKey = ev.EventID
		}
		if el.Headers == nil {
			el.Headers = map[string]string{}
		}
		if ev.Key != nil {
			if utf8.Valid(ev.Key) {
				k := string(ev.Key)
				el.Key = &k
			} else {
				el.KeyBase64 = ev.Key
			}
		}
		if json.Valid(ev.Payload) {
			el.Payload = ev.Payload
		} else {
			el.PayloadBase64 = ev.Payload
			if el.PayloadBase64 == nil {
				el.PayloadBase64 = []byte{}
			}
		}
		els[i] = el
	}
	return els
}

// batchResults turns a 2xx batch response's body into the rows' errors:
// nil when every row is processed, RowErrors otherwise.
func batchResults(evs []*Event, body []byte, maxRetryAfter time.Duration) error {
	var br batchResponse
	if len(bytes.TrimSpace(body)) == 0 || json.Unmarshal(body, &br) != nil || len(br.Results) == 0 {
		return nil
	}
	errs := make(RowErrors, len(evs))
	failed := false
	for _, r := range br.Results {
		var err error
		msg := r.Error
		if msg == "" {
			msg = "the receiver said " + r.Status
		}
		switch r.Status {
		case batchProcessed, "":
			continue
		case batchDead:
			err = Permanent(errors.New("http batch: " + msg))
		case batchRetry:
			err = errors.New("http batch: " + msg)
			if r.RetryAfter > 0 {
				d := time.Duration(r.RetryAfter * float64(time.Second))
				if maxRetryAfter > 0 && d > maxRetryAfter {
					d = maxRetryAfter
				}
				err = RetryAfter(d, err)
			}
		default:
			err = fmt.Errorf("http batch: unknown status %q for row %q (want processed, retry or dead)", r.Status, r.ID)
		}
		for i, ev := range evs {
			if ev.EventID == r.ID && (r.Source == "" || r.Source == ev.Source) {
				errs[i], failed = err, true
			}
		}
	}
	if !failed {
		return nil
	}
	return errs
}
