package main

// PNG plots with gonum.org/v1/plot.

import (
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type series struct {
	name string
	xs   []float64
	ys   []float64
}

// linePlot draws series against a (log) x axis.
func linePlot(path, title, xlabel, ylabel string, logX, logY bool, ss []series) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xlabel, ylabel
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	// A log axis needs a positive range: fall back to linear when the
	// points do not span one.
	distinct := map[float64]bool{}
	for _, s := range ss {
		for j, x := range s.xs {
			if j < len(s.ys) && !math.IsNaN(s.ys[j]) {
				distinct[x] = true
			}
		}
	}
	if len(distinct) < 2 {
		p.X.Scale, p.X.Tick.Marker = plot.LinearScale{}, plot.DefaultTicks{}
		p.Y.Scale, p.Y.Tick.Marker = plot.LinearScale{}, plot.DefaultTicks{}
		logY = false
	}
	for i, s := range ss {
		var pts plotter.XYs
		for j := range s.xs {
			if j < len(s.ys) && !math.IsNaN(s.ys[j]) && (!logY || s.ys[j] > 0) {
				pts = append(pts, plotter.XY{X: s.xs[j], Y: s.ys[j]})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		sc.Color = plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
	}
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.2*vg.Inch, path)
}

type barGroup struct {
	name string
	vals []float64 // one per category; NaN: missing
}

// barPlot draws grouped bars: one group per category, one bar per series.
func barPlot(path, title, ylabel string, categories []string, groups []barGroup, logY bool) error {
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = title, ylabel
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	w := vg.Points(math.Max(6, 60/float64(len(groups))))
	for i, g := range groups {
		vals := make(plotter.Values, len(categories))
		for j := range vals {
			v := math.NaN()
			if j < len(g.vals) {
				v = g.vals[j]
			}
			if math.IsNaN(v) {
				v = 0 // missing (callers use a log axis only when nothing is)
			}
			vals[j] = v
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(len(groups)-1)/2) * w
		p.Add(b)
		p.Legend.Add(g.name, b)
	}
	p.Legend.Top = true
	p.NominalX(categories...)
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.2*vg.Inch, path)
}

// stackedBars draws one stacked bar per category: segment i of every bar
// is layers[i] (values per category, NaN: 0), bottom first.
func stackedBars(path, title, ylabel string, categories []string, layers []barGroup) error {
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = title, ylabel
	w := vg.Points(math.Max(10, 240/float64(max(1, len(categories)))))
	var below *plotter.BarChart
	for i, g := range layers {
		vals := make(plotter.Values, len(categories))
		for j := range vals {
			if j < len(g.vals) && !math.IsNaN(g.vals[j]) && g.vals[j] > 0 {
				vals[j] = g.vals[j]
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(g.name, b)
	}
	// Room above the tallest bar for the legend.
	top := 0.0
	for j := range categories {
		h := 0.0
		for _, g := range layers {
			if j < len(g.vals) && g.vals[j] > 0 {
				h += g.vals[j]
			}
		}
		top = math.Max(top, h)
	}
	p.Y.Min, p.Y.Max = 0, top*(1.2+0.08*float64(len(layers)))
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(categories...)
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
