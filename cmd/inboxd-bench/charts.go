package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	// colours of the rates chart: the references in greys, inboxd in blue.
	referenceColor = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	riverColor     = color.RGBA{R: 230, G: 130, B: 40, A: 255}
	inboxdColor    = color.RGBA{R: 40, G: 100, B: 190, A: 255}
)

// chartLabel breaks a rate's label over two lines for the X axis.
func chartLabel(r Rate) string {
	switch r.Name {
	case "raw":
		return "raw SQL\nyardstick"
	case "river":
		return fmt.Sprintf("River\n(%s)", strings.TrimSuffix(strings.TrimPrefix(r.Label, "River ("), ")"))
	case "pool":
		return "inboxd\nworker pool"
	case "e2e":
		return "inboxd\nend to end"
	case "e2e-claimed":
		return "inboxd end to end\nhand-off off"
	case "rabbitmq-prefetch" + strconv.Itoa(rabbitPrefetch):
		return fmt.Sprintf("inboxd ← RabbitMQ\nprefetch %d", rabbitPrefetch)
	case "rabbitmq-publish":
		return "RabbitMQ publish\nalone (ceiling)"
	case "rabbitmq":
		return "inboxd ← RabbitMQ\ndefault prefetch"
	case "nats-publish":
		return "NATS publish\nalone (ceiling)"
	case "nats":
		return "inboxd ←\nNATS JetStream"
	case "outbox":
		return "inboxd outbox\nrelay → Kafka"
	case "outbox-publish":
		return "raw Kafka producer\nalone (ceiling)"
	case "webhook":
		return "inboxd ← webhooks\n(signed POSTs)"
	case "webhook-kafka":
		return "inboxd ← Kafka\nsame rows, stored"
	case "retained":
		return fmt.Sprintf("inboxd end to end\n%s retained rows", strings.TrimSuffix(strings.TrimPrefix(r.Label, "inboxd end to end, "), " retained rows"))
	}
	return r.Label
}

// isCeiling reports whether a rate is a broker's publishing alone: the
// ceiling of the run from that broker, not a measurement of inboxd.
func isCeiling(name string) bool { return strings.HasSuffix(name, "-publish") }

// ceilingOf is the name of the ceiling of a broker run, "" for the others.
func ceilingOf(name string) string {
	for _, b := range brokerRuns {
		if b.run == name {
			return b.ceiling
		}
	}
	if name == "outbox" {
		return "outbox-publish"
	}
	return ""
}

// ratesChart draws the throughput measurements side by side, each bar
// labelled with its events/s and its ratio to the yardstick (a broker
// run's, to its broker's publish rate). The scale is set by the other bars:
// a publish rate far above them is cut, its label saying so.
func ratesChart(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Throughput, %s events each (%d CPUs shared, load average %.1f–%.1f; %s)", comma(float64(r.Events)),
		r.Machine.CPUs, r.Machine.LoadAverageStart, r.Machine.LoadAverageEnd, r.GeneratedAt.Format("2006-01-02"))
	p.Y.Label.Text = "events/s"
	p.Title.Padding = vg.Points(6)
	p.Y.Min = 0
	p.X.Min, p.X.Max = -0.6, float64(len(r.Rates))-0.4
	p.Add(plotter.NewGrid())
	raw, hasRaw := r.rate("raw")
	var names []string
	var xys []plotter.XY
	var labels []string
	top := 0.0
	for _, x := range r.Rates {
		if !isCeiling(x.Name) {
			top = max(top, x.PerSecond)
		}
	}
	if top == 0 { // ceilings alone
		for _, x := range r.Rates {
			top = max(top, x.PerSecond)
		}
	}
	for i, x := range r.Rates {
		shown := min(x.PerSecond, top*1.1)
		bars, err := plotter.NewBarChart(plotter.Values{shown}, vg.Points(48))
		if err != nil {
			return err
		}
		bars.XMin = float64(i)
		bars.LineStyle.Width = 0
		switch {
		case x.Name == "raw" || isCeiling(x.Name):
			bars.Color = referenceColor
		case x.Name == "river":
			bars.Color = riverColor
		default:
			bars.Color = inboxdColor
		}
		p.Add(bars)
		names = append(names, chartLabel(x))
		label := comma(x.PerSecond)
		if c, ok := r.rate(ceilingOf(x.Name)); ok && c.PerSecond > 0 {
			label += fmt.Sprintf("\n%.2f× publish", x.PerSecond/c.PerSecond)
		} else if hasRaw && x.Name != "raw" && !isCeiling(x.Name) {
			label += fmt.Sprintf("\n%.2f× yardstick", x.PerSecond/raw.PerSecond)
		}
		if shown < x.PerSecond {
			label += "\n(bar cut)"
		}
		xys = append(xys, plotter.XY{X: float64(i), Y: shown})
		labels = append(labels, label)
	}
	p.Y.Max = top * 1.25
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = text.XCenter
		l.TextStyle[i].YAlign = text.YBottom
	}
	l.Offset = vg.Point{Y: vg.Points(3)}
	p.Add(l)
	p.NominalX(names...)
	// About 1.35 inch a bar, 9 inches at least: the labels must not overlap.
	width := max(9*vg.Inch, vg.Length(len(r.Rates))*1.35*vg.Inch)
	return p.Save(width, 4.5*vg.Inch, path)
}

// latencyChart draws the latency percentiles over the offered load, from
// the produce time (solid) and from received_at (dashed), with the 100 ms
// target, on a logarithmic scale.
func latencyChart(path string, r *Results) error {
	lat := r.Latency
	p := plot.New()
	p.Title.Text = fmt.Sprintf("inboxd latency over offered load (end-to-end maximum %s events/s, %.0fs per load)", comma(lat.MaxRate), lat.PhaseSeconds)
	p.Y.Label.Text = "latency to processed_at, ms (log scale)"
	p.X.Min = 0
	// Logarithmic: a saturated load's seconds must not flatten the
	// milliseconds of the others.
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Title.Padding = vg.Points(6)
	legend := plot.NewLegend() // drawn right of the plot
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())

	series := []struct {
		name  string
		get   func(LatencyPoint) float64
		col   color.Color
		dash  bool
		width vg.Length
	}{
		{"produced → processed p99", func(x LatencyPoint) float64 { return x.ProducedToProcessed.P99MS }, color.RGBA{R: 200, G: 40, B: 40, A: 255}, false, 2},
		{"produced → processed p95", func(x LatencyPoint) float64 { return x.ProducedToProcessed.P95MS }, riverColor, false, 2},
		{"produced → processed p50", func(x LatencyPoint) float64 { return x.ProducedToProcessed.P50MS }, inboxdColor, false, 2},
		{"received → processed p99", func(x LatencyPoint) float64 { return x.ReceivedToProcessed.P99MS }, color.RGBA{R: 200, G: 40, B: 40, A: 255}, true, 1.5},
		{"received → processed p95", func(x LatencyPoint) float64 { return x.ReceivedToProcessed.P95MS }, riverColor, true, 1.5},
		{"received → processed p50", func(x LatencyPoint) float64 { return x.ReceivedToProcessed.P50MS }, inboxdColor, true, 1.5},
	}
	top, bottom := 100.0, 100.0
	for _, s := range series {
		xys := make(plotter.XYs, len(lat.Points))
		for i, pt := range lat.Points {
			xys[i] = plotter.XY{X: pt.Offered, Y: max(s.get(pt), 0.1)}
			top, bottom = max(top, xys[i].Y), min(bottom, xys[i].Y)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color, line.Width = s.col, vg.Points(float64(s.width))
		points.Color = s.col
		points.Shape = draw.CircleGlyph{}
		if s.dash {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line, points)
		legend.Add(s.name, line, points)
	}
	target := plotter.NewFunction(func(float64) float64 { return 100 })
	target.Color = referenceColor
	target.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(target)
	legend.Add("target p99 < 100 ms", target)
	if n := len(lat.Points); n > 0 {
		p.X.Max = lat.Points[n-1].Offered * 1.1
	}
	// One tick per load: its rate and its share of the maximum.
	var xt plot.ConstantTicks
	for _, pt := range lat.Points {
		xt = append(xt, plot.Tick{Value: pt.Offered, Label: fmt.Sprintf("%s\n%.0f%%", comma(pt.Offered), pt.Load*100)})
	}
	p.X.Tick.Marker = xt
	p.X.Label.Text = "offered load, events/s and % of the end-to-end maximum"
	p.Y.Min, p.Y.Max = bottom/1.5, top*1.5

	const w, h = 10 * vg.Inch, 5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	lr := legend.Rectangle(dc)
	lw := lr.Max.X - lr.Min.X + vg.Points(12)
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	legend.Draw(draw.Crop(dc, w-lw+vg.Points(6), 0, 0, -vg.Points(36)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks marks a logarithmic axis at 1, 2 and 5 times the powers of ten,
// labelled, and at the other integers times them, unlabelled.
type logTicks struct{}

// Ticks returns the marks between min and max.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(min))); d <= max; d *= 10 {
		for m := 1; m <= 9; m++ {
			v := float64(m) * d
			if v < min || v > max {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}
