package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// soakSeries is one line of a panel.
type soakSeries struct {
	name  string
	value func(soakSample) float64
	color color.Color
}

var (
	soakBlue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	soakOrange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	soakGreen  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	soakRed    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
)

// drawSoakPNG draws the run's memory (RSS, cgroup, Go heap), BPF memory
// and CPU over time, one panel each, into a PNG at path.
func drawSoakPNG(path, title string, samples []soakSample) error {
	toMiB := func(f func(soakSample) uint64) func(soakSample) float64 {
		return func(s soakSample) float64 { return float64(f(s)) / (1 << 20) }
	}
	panels := []struct {
		title, unit string
		series      []soakSeries
	}{
		{title, "MiB", []soakSeries{
			{"cgroup (BPF maps and page cache included)", toMiB(func(s soakSample) uint64 { return s.cgroup }), soakRed},
			{"cgroup less page cache", toMiB(func(s soakSample) uint64 { return s.cgroup - min(s.cgroup, s.cgroupCache) }), soakOrange},
			{"RSS", toMiB(func(s soakSample) uint64 { return s.rss }), soakBlue},
			{"Go heap", toMiB(func(s soakSample) uint64 { return s.goHeap }), soakGreen},
		}},
		{"BPF map memory (memlock)", "MiB", []soakSeries{
			{"all maps", toMiB(func(s soakSample) uint64 { return s.bpf.total() }), soakBlue},
			{"unwind tables", toMiB(func(s soakSample) uint64 { return s.bpf.innerByte }), soakOrange},
		}},
		{"collector CPU (from the first interval on: the first sample holds the start-up)", "% of a core", []soakSeries{
			{"CPU", func(s soakSample) float64 { return s.cpu }, soakBlue},
		}},
	}
	cpuSamples := samples
	if len(cpuSamples) > 1 {
		cpuSamples = cpuSamples[1:]
	}
	const rows = 3
	img := vgimg.New(10*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(10)}
	for i, panel := range panels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "minutes since the collector was ready"
		p.Y.Label.Text = panel.unit
		p.X.Tick.Marker = minuteTicks{}
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		panelSamples := samples
		if i == len(panels)-1 {
			panelSamples = cpuSamples
		}
		top := 0.0
		for _, s := range panel.series {
			line, err := plotter.NewLine(soakPoints(panelSamples, s.value))
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			line.Color = s.color
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(s.name, line)
			for _, pt := range line.XYs {
				top = max(top, pt.Y)
			}
		}
		// Room above the lines for the legend.
		p.Y.Min, p.Y.Max = 0, max(top*1.35, 1)
		p.Draw(tiles.At(dc, 0, i))
	}
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

// soakPoints are value's points over the samples, x in minutes.
func soakPoints(samples []soakSample, value func(soakSample) float64) plotter.XYs {
	pts := make(plotter.XYs, 0, len(samples))
	for _, s := range samples {
		pts = append(pts, plotter.XY{X: float64(s.at) / float64(time.Minute), Y: value(s)})
	}
	return pts
}

// minuteTicks marks the time axis every 1, 2, 5, 10 or 15 minutes: the
// smallest step with at most 12 marks.
type minuteTicks struct{}

func (minuteTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 15.0
	for _, s := range []float64{0.5, 1, 2, 5, 10} {
		if (hi-lo)/s <= 12 {
			step = s
			break
		}
	}
	var ticks []plot.Tick
	for x := math.Ceil(lo/step) * step; x <= hi; x += step {
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
	}
	return ticks
}
