package handlers

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// batchFields are the fields of a route's batch.
var batchFields = [...]string{"max_rows", "max_bytes", "max_wait"}

// parseBatch parses a route's batch mapping ({max_rows: 100, max_bytes:
// 1048576, max_wait: 50ms}); max_rows is required. Its errors name the
// field as "batch: max_rows: ...".
func parseBatch(n *yaml.Node) (Batch, []string) {
	var b Batch
	if isNull(n) || n.Kind != yaml.MappingNode {
		return b, []string{"batch: must be a mapping with max_rows, max_bytes and max_wait, such as {max_rows: 100, max_wait: 50ms}"}
	}
	var errs []string
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := resolve(n.Content[i]), resolve(n.Content[i+1])
		if key.Kind != yaml.ScalarNode || !slices.Contains(batchFields[:], key.Value) {
			errs = append(errs, fmt.Sprintf("batch: unknown field %q (want max_rows, max_bytes, max_wait)", key.Value))
			continue
		}
		if seen[key.Value] {
			errs = append(errs, fmt.Sprintf("batch: %s: given twice", key.Value))
			continue
		}
		seen[key.Value] = true
		s, ok := scalarValue(val)
		if !ok || s == "" {
			errs = append(errs, fmt.Sprintf("batch: %s: must be a value", key.Value))
			continue
		}
		switch key.Value {
		case "max_rows":
			r, err := strconv.Atoi(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("batch: max_rows: %q is not a whole number", s))
			case r < 1 || r > MaxBatchRows:
				errs = append(errs, fmt.Sprintf("batch: max_rows: must be between 1 and %d, got %d", MaxBatchRows, r))
			default:
				b.MaxRows = r
			}
		case "max_bytes":
			r, err := strconv.ParseInt(s, 10, 64)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("batch: max_bytes: %q is not a whole number of bytes", s))
			case r < 1:
				errs = append(errs, fmt.Sprintf("batch: max_bytes: must be at least 1, got %d", r))
			default:
				b.MaxBytes = r
			}
		case "max_wait":
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("batch: max_wait: %q is not a Go duration such as 50ms", s))
			case d < 0 || d > MaxBatchWait:
				errs = append(errs, fmt.Sprintf("batch: max_wait: must be between 0 and %s", MaxBatchWait))
			default:
				b.MaxWait = d
			}
		}
	}
	if !seen["max_rows"] {
		errs = append(errs, "batch: max_rows: required")
	}
	if len(errs) > 0 {
		return Batch{}, errs
	}
	return b, nil
}
