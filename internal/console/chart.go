package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
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
