package faultsuite

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sample is one series of a scrape: a metric name, its labels and value.
type Sample struct {
	// Name is the metric name (for histograms: name_bucket, name_sum, …).
	Name string
	// Labels are the series' labels.
	Labels map[string]string
	// Value is the sample value.
	Value float64
}

// Metrics is one scrape of a /metrics endpoint in the Prometheus text
// format.
type Metrics []Sample

// ScrapeMetrics fetches and parses http://addr/metrics.
func ScrapeMetrics(addr string, timeout time.Duration) (Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", addr, resp.Status)
	}
	var m Metrics
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", addr, err)
		}
		m = append(m, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	return m, nil
}

// parseSample parses `name{a="b",…} value` (no timestamps: promhttp writes
// none).
func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("bad sample line %q", line)
	}
	s.Name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("bad labels in %q", line)
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				val.WriteByte(rest[j])
			}
			if j >= len(rest) {
				return s, fmt.Errorf("unterminated label value in %q", line)
			}
			s.Labels[key] = val.String()
			rest = rest[j+1:]
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("bad value in %q: %w", line, err)
	}
	s.Value = v
	return s, nil
}

// matches reports whether s carries every label pair in kv (k1, v1, k2,
// v2, …).
func (s Sample) matches(kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		if s.Labels[kv[i]] != kv[i+1] {
			return false
		}
	}
	return true
}

// Has reports whether any series of the metric name is present.
func (m Metrics) Has(name string) bool {
	for _, s := range m {
		if s.Name == name || strings.HasPrefix(s.Name, name+"_") && isHistogramSuffix(s.Name[len(name):]) {
			return true
		}
	}
	return false
}

func isHistogramSuffix(s string) bool {
	return s == "_bucket" || s == "_sum" || s == "_count"
}

// Value sums the series of name that carry the label pairs kv (k1, v1, …).
func (m Metrics) Value(name string, kv ...string) float64 {
	var sum float64
	for _, s := range m {
		if s.Name == name && s.matches(kv) {
			sum += s.Value
		}
	}
	return sum
}

// Quantile estimates the q-quantile of the histogram name (over every
// series carrying kv, buckets added up) the way PromQL's
// histogram_quantile does: linear interpolation inside the bucket. ok is
// false when the histogram is absent or empty.
func (m Metrics) Quantile(name string, q float64, kv ...string) (v float64, ok bool) {
	buckets := map[float64]float64{}
	for _, s := range m {
		if s.Name != name+"_bucket" || !s.matches(kv) {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		buckets[le] += s.Value
	}
	return bucketQuantile(q, buckets)
}

// QuantileDelta is Quantile over the observations made between before and
// m (both scrapes of the same process).
func (m Metrics) QuantileDelta(before Metrics, name string, q float64, kv ...string) (float64, bool) {
	buckets := map[float64]float64{}
	for _, pass := range []struct {
		ms   Metrics
		sign float64
	}{{m, 1}, {before, -1}} {
		for _, s := range pass.ms {
			if s.Name != name+"_bucket" || !s.matches(kv) {
				continue
			}
			le, err := strconv.ParseFloat(s.Labels["le"], 64)
			if err != nil {
				continue
			}
			buckets[le] += pass.sign * s.Value
		}
	}
	return bucketQuantile(q, buckets)
}

func bucketQuantile(q float64, buckets map[float64]float64) (float64, bool) {
	if len(buckets) == 0 {
		return 0, false
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := buckets[les[len(les)-1]]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	prevLe, prevCount := 0.0, 0.0
	for _, le := range les {
		c := buckets[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevLe, true // above the highest finite bucket
			}
			if c == prevCount {
				return le, true
			}
			return prevLe + (le-prevLe)*(rank-prevCount)/(c-prevCount), true
		}
		prevLe, prevCount = le, c
	}
	return prevLe, true
}
