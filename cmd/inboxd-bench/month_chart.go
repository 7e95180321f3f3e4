package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// monthChart draws the month run's minutes, one panel per figure, both
// modes in each: an SVG at path.
func monthChart(path string, r *MonthResults) error {
	panels := []struct {
		title string
		get   func(MonthMinute) float64
	}{
		{"processed events/s", func(m MonthMinute) float64 { return m.ProcessedPerSecond }},
		{"p99 received → processed, ms", func(m MonthMinute) float64 { return m.ReceivedToProcessedP99MS }},
		{"inbox size, MB (partitions, indexes)", func(m MonthMinute) float64 { return float64(m.InboxBytes) / 1e6 }},
		{"dead tuples in the inbox", func(m MonthMinute) float64 { return float64(m.DeadTuples) }},
		{"WAL bytes per event", func(m MonthMinute) float64 { return m.WALBytesPerEvent }},
		{"PostgreSQL CPU ms per event", func(m MonthMinute) float64 { return m.CPUMSPerEvent }},
		{"autovacuum worker seconds per minute", func(m MonthMinute) float64 { return m.AutovacuumSeconds }},
		{"retention DELETEs per second", func(m MonthMinute) float64 { return m.RetentionDeletedPerSecond }},
	}
	colors := map[string]color.Color{"delete": riverColor, "partitions": inboxdColor}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minute"
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Y.Min = 0
		for _, run := range r.Runs {
			xys := make(plotter.XYs, len(run.Minutes))
			for j, m := range run.Minutes {
				xys[j] = plotter.XY{X: float64(m.Minute), Y: pn.get(m)}
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color, l.Width = colors[run.Mode], vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(run.Mode+" retention", l)
		}
		if plots[i/cols] == nil {
			plots[i/cols] = make([]*plot.Plot, cols)
		}
		plots[i/cols][i%cols] = p
	}
	const w, h = 12 * vg.Inch, 14 * vg.Inch
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	top := vg.Points(30)
	title := fmt.Sprintf("month run: %.0f events/s (%.0f%% of %.0f) for %d min per mode, both at once; retention %s, partition span %s",
		r.Offered, r.Load*100, r.MaxRate, r.Minutes, r.Retention, r.Span)
	titleFont := plot.DefaultFont
	titleFont.Size = vg.Points(13)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: titleFont, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter},
		vg.Point{X: w / 2, Y: h - top/2}, title)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: top}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
