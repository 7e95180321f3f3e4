package routesfile

import (
	"fmt"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/handlers"
)

// batchFields are the fields of a route's batch.
var batchFields = []string{"max_rows", "max_bytes", "max_wait"}

// parseBatch parses a route's batch mapping ({max_rows: 100, max_bytes:
// 1048576, max_wait: 50ms}); max_rows is required. Its errors name the
// field as "batch: max_rows: ...".
func parseBatch(n *yaml.Node) (handlers.Batch, []string) {
	var b handlers.Batch
	values, errs := subMapping(n, "batch", batchFields, "{max_rows: 100, max_wait: 50ms}")
	if values == nil {
		return b, errs
	}
	if _, ok := values["max_rows"]; !ok {
		errs = append(errs, "batch: max_rows: required")
	}
	if s := values["max_rows"]; s != "" {
		r, err := strconv.Atoi(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("batch: max_rows: %q is not a whole number", s))
		case r < 1 || r > handlers.MaxBatchRows:
			errs = append(errs, fmt.Sprintf("batch: max_rows: must be between 1 and %d, got %d", handlers.MaxBatchRows, r))
		default:
			b.MaxRows = r
		}
	}
	if s := values["max_bytes"]; s != "" {
		r, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("batch: max_bytes: %q is not a whole number of bytes", s))
		case r < 1:
			errs = append(errs, fmt.Sprintf("batch: max_bytes: must be at least 1, got %d", r))
		default:
			b.MaxBytes = r
		}
	}
	if s := values["max_wait"]; s != "" {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("batch: max_wait: %q is not a Go duration such as 50ms", s))
		case d < 0 || d > handlers.MaxBatchWait:
			errs = append(errs, fmt.Sprintf("batch: max_wait: must be between 0 and %s", handlers.MaxBatchWait))
		default:
			b.MaxWait = d
		}
	}
	if len(errs) > 0 {
		return handlers.Batch{}, errs
	}
	return b, nil
}
