package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/ops"
)

// chart draws the last hour's processed (green) and dead (red) rows per
// minute as an inline SVG bar chart, a bar pair per minute, the oldest
// minute on the left. Every value in it is a number the code formats.
func chart(mins []driver.MinuteCounts, now time.Time) template.HTML {
	const width, height, bars = 600, 120, 60
	end := now.UTC().Truncate(time.Minute)
	start := end.Add(-(bars - 1) * time.Minute)
	var proc, dead [bars]int64
	var top int64 = 1
	for _, m := range mins {
		i := int(m.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= bars {
			continue
		}
		proc[i], dead[i] = m.Processed, m.Dead
		top = max(top, m.Processed, m.Dead)
	}
	slot := float64(width) / bars
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" aria-label="rows processed and dead per minute over the last hour">`,
		width, height+14, width, height+14)
	bar := func(i int, v int64, off float64, class, what string) {
		if v == 0 {
			return
		}
		h := float64(v) / float64(top) * height
		fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d %s</title></rect>`,
			class, float64(i)*slot+off, height-h, slot/2-0.5, h, start.Add(time.Duration(i)*time.Minute).Format("15:04"), v, what)
	}
	for i := range bars {
		bar(i, proc[i], 0, "processed", "processed")
		bar(i, dead[i], slot/2, "dead", "dead")
	}
	fmt.Fprintf(&b, `<text x="0" y="%d">%s</text><text x="%d" y="%d" text-anchor="end">%s UTC · max %d/min</text></svg>`,
		height+12, start.Format("15:04"), width, height+12, end.Format("15:04"), top)
	return template.HTML(b.String()) // #nosec: built from numbers and times only
}

// seriesCharts draws a route's series over its window as two inline SVG
// charts: the rows processed (green) and failed (red: retried and dead)
// per slot, and the processed rows' p50 and p99 latency per slot as
// lines. slots is the window's number of slots, each slot long, the last
// ending at end. Every value in them is a number or a time the code
// formats.
func seriesCharts(s ops.Series, slots int, slot time.Duration, end time.Time) template.HTML {
	const width, height = 600, 90
	start := end.Add(-time.Duration(slots) * slot)
	proc, fail := make([]int64, slots), make([]int64, slots)
	p50, p99 := make([]time.Duration, slots), make([]time.Duration, slots)
	var top int64 = 1
	var slow = time.Millisecond
	for _, p := range s.Points {
		i := int(p.At.Sub(start) / slot)
		if i < 0 || i >= slots {
			continue
		}
		proc[i], fail[i], p50[i], p99[i] = p.Processed, p.Retried+p.Dead, p.P50, p.P99
		top = max(top, p.Processed, p.Retried+p.Dead)
		slow = max(slow, p.P99)
	}
	w := float64(width) / float64(slots)
	var b strings.Builder
	label := func(what string) {
		fmt.Fprintf(&b, `<text x="0" y="%d">%s</text><text x="%d" y="%d" text-anchor="end">%s UTC · %s</text></svg>`,
			height+12, start.UTC().Format("Jan 2 15:04"), width, height+12, end.UTC().Format("Jan 2 15:04"), what)
	}
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" aria-label="rows processed and failed per %s">`,
		width, height+14, width, height+14, slot)
	for i := range slots {
		at := start.Add(time.Duration(i) * slot).UTC().Format("Jan 2 15:04")
		if proc[i] > 0 {
			h := float64(proc[i]) / float64(top) * height
			fmt.Fprintf(&b, `<rect class="processed" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s: %d processed</title></rect>`,
				float64(i)*w, height-h, w/2, h, at, proc[i])
		}
		if fail[i] > 0 {
			h := float64(fail[i]) / float64(top) * height
			fmt.Fprintf(&b, `<rect class="dead" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s: %d failed</title></rect>`,
				float64(i)*w+w/2, height-h, w/2, h, at, fail[i])
		}
	}
	label(fmt.Sprintf("max %d per %s", top, slotName(slot)))
	fmt.Fprintf(&b, `<svg class="chart latency" role="img" viewBox="0 0 %d %d" width="%d" height="%d" aria-label="p50 and p99 latency from received to processed">`,
		width, height+14, width, height+14)
	for _, l := range []struct {
		class string
		v     []time.Duration
	}{{"p99", p99}, {"p50", p50}} {
		var pts []string
		for i, d := range l.v {
			if d > 0 {
				x, y := float64(i)*w+w/2, height-float64(d)/float64(slow)*height
				pts = append(pts, fmt.Sprintf("%.2f,%.2f", x, y))
				fmt.Fprintf(&b, `<circle class="%s" cx="%.2f" cy="%.2f" r="2"><title>%s %s: %s</title></circle>`,
					l.class, x, y, start.Add(time.Duration(i)*slot).UTC().Format("Jan 2 15:04"), l.class, d.Round(time.Millisecond))
			}
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline class="%s" points="%s"><title>%s</title></polyline>`, l.class, strings.Join(pts, " "), l.class)
		}
	}
	label("p50 and p99 latency, max " + slow.Round(time.Millisecond).String())
	return template.HTML(b.String()) // #nosec: built from numbers and times only
}

// slotName names a slot's length: minute or hour.
func slotName(d time.Duration) string {
	if d >= time.Hour {
		return "hour"
	}
	return "minute"
}
