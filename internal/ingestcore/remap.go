package ingestcore

import (
	"fmt"

	"github.com/inboxd/inboxd/ingest"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
)

// Stored is a rejected row as the inbox holds it, whatever its source: what
// `inboxd requeue --status rejected` maps again once the cause is fixed.
// It names no broker's types.
type Stored struct {
	// Source is the row's source (its kafka_topic when it has one).
	Source string
	// EventID is the rejected row's event id, whose form tells which kind
	// of source stored it.
	EventID string
	// Key and Payload are the row's columns.
	Key, Payload []byte
	// Headers are the headers column, decoded ({"base64": …} values
	// decoded), sorted by name.
	Headers []Header
	// Partition and Offset are its Kafka position (0 for the other kinds).
	Partition int
	Offset    int64
}

// RemapRule is one kind of source's rule for its own rejected rows.
type RemapRule interface {
	// Owns reports whether s was stored by a source of this kind (by its
	// event id's form: each kind gives its rejected rows ids of its own).
	Owns(s Stored) bool
	// Remap maps s again by the kind's current rules.
	Remap(s Stored) Row
}

// Remapper is what a source (a source.Source of ingest/kafka, amqp, nats
// or webhook) answers to give its kind's remap rule, with its settings.
type Remapper interface {
	RemapRule() RemapRule
}

// Remappers are the remap rules of the kinds of source, by kind.
type Remappers map[string]RemapRule

// RemappersOf are the remap rules of sources, by their kinds (a source
// without one is left out).
func RemappersOf(sources ...sourceapi.Source) Remappers {
	rs := Remappers{}
	for _, s := range sources {
		if r, ok := s.(Remapper); ok {
			rs[s.Kind()] = r.RemapRule()
		}
	}
	return rs
}

// remapOrder is the order in which the kinds are asked whether they own a
// row: Kafka's rejected ids are positions ("<topic>/<partition>/<offset>"),
// and a row no other kind owns is taken for a Kafka row, so it comes last.
var remapOrder = []string{ingest.SourceWebhook, ingest.SourceAMQP, ingest.SourceNATS, ingest.SourceKafka}

// Remap maps s again by the rule of the kind that owns it. A row no
// known kind owns stays rejected and says so.
func (rs Remappers) Remap(s Stored) Row {
	for _, kind := range remapOrder {
		if r := rs[kind]; r != nil && r.Owns(s) {
			return r.Remap(s)
		}
	}
	return Row{Source: s.Source, EventID: s.EventID, Key: s.Key, Payload: s.Payload, Status: StatusRejected,
		LastError: fmt.Sprintf("no kind of source owns the rejected row %q of %q", s.EventID, s.Source)}
}
