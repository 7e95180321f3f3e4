package ingestcore

import (
	"time"

	"github.com/inboxd/inboxd/ingest"
)

// PipelineDefaults returns p with every zero field set to its default
// (package ingest's Default* constants, and MapDefaults for its mapping):
// the one place of the pipeline's defaults, every source's.
func PipelineDefaults(p ingest.PipelineConfig) ingest.PipelineConfig {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if p.BatchSize == 0 {
		p.BatchSize = ingest.DefaultBatchSize
	}
	if p.BatchBytes == 0 {
		p.BatchBytes = ingest.DefaultBatchBytes
	}
	setDur(&p.BatchTimeout, ingest.DefaultBatchTimeout)
	setDur(&p.Linger, ingest.DefaultLinger)
	setDur(&p.RetryBackoffMin, ingest.DefaultRetryBackoffMin)
	setDur(&p.RetryBackoffMax, ingest.DefaultRetryBackoffMax)
	setDur(&p.WriteTimeout, ingest.DefaultWriteTimeout)
	setDur(&p.AckTimeout, ingest.DefaultCommitTimeout)
	setDur(&p.CloseTimeout, ingest.DefaultCloseTimeout)
	p.Mapping = MapDefaults(p.Mapping)
	return p
}

// MapDefaults returns o with every zero field set to
// ingest.DefaultMapOptions' (a nil header list is the default list; an
// empty non-nil one means no header is consulted).
func MapDefaults(o ingest.MapOptions) ingest.MapOptions {
	def := ingest.DefaultMapOptions()
	if o.EventIDHeaders == nil {
		o.EventIDHeaders = def.EventIDHeaders
	}
	if o.EventTypeHeaders == nil {
		o.EventTypeHeaders = def.EventTypeHeaders
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = def.MaxPayload
	}
	if o.MaxHeaders <= 0 {
		o.MaxHeaders = def.MaxHeaders
	}
	return o
}
