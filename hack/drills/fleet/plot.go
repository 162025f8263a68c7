package fleet

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/retryguard/retryguard/hack/drills/drillreport"
)

var modeColors = map[string]color.Color{
	Naive:      color.RGBA{R: 214, G: 39, B: 40, A: 255},
	Retryguard: color.RGBA{R: 31, G: 119, B: 180, A: 255},
}

var modeLabels = map[string]string{
	Naive:      "naive: 3 × 3 × 3 attempts, fixed delays, no budget",
	Retryguard: "Retryguard: one layer retries, full jitter, counted budget",
}

// plotReport draws, for each trigger, the requests the dependency received
// per second in both runs on one chart, against its capacity and the
// fleet's primary rate, the trigger's window shaded.
func plotReport(rep *Report, path string) error {
	var kinds []string
	byKind := map[string][]*Run{}
	for _, r := range rep.Runs {
		if byKind[r.Trigger] == nil {
			kinds = append(kinds, r.Trigger)
		}
		byKind[r.Trigger] = append(byKind[r.Trigger], r)
	}
	if len(kinds) == 0 {
		return fmt.Errorf("no run to plot")
	}
	plots := make([]*plot.Plot, 0, len(kinds))
	for _, kind := range kinds {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("Trigger %q: requests per second at the dependency, %d pods, %d operations/s", kind, rep.Pods, rep.PrimaryRate)
		p.X.Label.Text = "seconds since the run began"
		p.Y.Label.Text = "requests/s received"
		ymax, xmax := float64(rep.Capacity), 0.0
		for _, r := range byKind[kind] {
			for _, v := range r.Figures.Received {
				ymax = max(ymax, float64(v))
			}
			xmax = max(xmax, float64(len(r.Figures.Received)))
		}
		ymax *= 1.35 // headroom for the legend
		w, err := byKind[kind][0].trigger()
		if err != nil {
			return err
		}
		if err := drillreport.ShadeWindow(p, w.From, w.To, 0, ymax); err != nil {
			return err
		}
		p.Legend.Add("trigger on", drillreport.WindowSwatch())
		for _, r := range byKind[kind] {
			l, err := plotter.NewLine(drillreport.PerSecond(r.Figures.Received))
			if err != nil {
				return err
			}
			l.Color, l.Width = modeColors[r.Mode], vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(modeLabels[r.Mode], l)
		}
		for _, h := range []struct {
			y      float64
			label  string
			dashes []vg.Length
		}{
			{float64(rep.Capacity), fmt.Sprintf("capacity, %d/s", rep.Capacity), []vg.Length{vg.Points(6), vg.Points(3)}},
			{float64(rep.PrimaryRate) * MaxSecondRatio, fmt.Sprintf("%.2f × the primary rate", MaxSecondRatio), []vg.Length{vg.Points(2), vg.Points(2)}},
		} {
			f := plotter.NewFunction(func(float64) float64 { return h.y })
			f.Dashes, f.Width = h.dashes, vg.Points(1)
			p.Add(f)
			p.Legend.Add(h.label, f)
		}
		p.Legend.Top = true
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, xmax, 0, ymax
		p.Y.Tick.Marker = drillreport.WholeTicks{}
		p.Add(plotter.NewGrid())
		plots = append(plots, p)
	}
	return drillreport.Stack(plots, vgsvg.New(drillreport.StackWidth, vg.Length(3.4*float64(len(plots)))*vg.Inch), path)
}
