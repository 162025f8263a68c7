package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/retryguard/retryguard/hack/drills/drillreport"
)

// writeOut writes report.json and drill.png into dir.
func writeOut(dir string, rep *report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := encodeReport(rep)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		return err
	}
	return plotReport(rep, filepath.Join(dir, "drill.png"))
}

// encodeReport is report.json in the drills' shared format.
func encodeReport(rep *report) ([]byte, error) { return drillreport.EncodeJSON(rep) }

var optionColors = map[string]color.Color{
	"A": color.RGBA{R: 214, G: 39, B: 40, A: 255},
	"B": color.RGBA{R: 255, G: 127, B: 14, A: 255},
	"C": color.RGBA{R: 31, G: 119, B: 180, A: 255},
}

// plotReport draws outbound attempts per second for every option against
// the ban line, the fault window shaded, and below it C's budget balance
// and budget denials.
func plotReport(rep *report, path string) error {
	sc := rep.Scenario
	outbound := plot.New()
	outbound.Title.Text = fmt.Sprintf("Outbound attempts per second, %d logical req/s, 429 on %.0f%% of attempts during the fault",
		sc.RPS, sc.FaultRate*100)
	outbound.X.Label.Text = "seconds since the start"
	outbound.Y.Label.Text = "attempts/s at the vendor"
	ymax := float64(sc.BanLimit)
	var c *optionReport
	for i := range rep.Options {
		o := &rep.Options[i]
		if o.Name == "C" {
			c = o
		}
		for _, v := range o.Series.Outbound {
			ymax = max(ymax, float64(v))
		}
	}
	ymax *= 1.45 // headroom for the legend
	if err := shadeFault(outbound, sc.FaultSeconds, 0, ymax); err != nil {
		return err
	}
	outbound.Legend.Add("fault window: 429 on most attempts", drillreport.WindowSwatch())
	for _, o := range rep.Options {
		l, err := plotter.NewLine(drillreport.PerSecond(o.Series.Outbound))
		if err != nil {
			return err
		}
		l.Color = optionColors[o.Name]
		l.Width = vg.Points(1.5)
		outbound.Add(l)
		outbound.Legend.Add(o.Label, l)
	}
	ban := plotter.NewFunction(func(float64) float64 { return float64(sc.BanLimit) })
	ban.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	ban.Width = vg.Points(1.5)
	outbound.Add(ban)
	outbound.Legend.Add(fmt.Sprintf("the vendor bans above %d/s", sc.BanLimit), ban)
	outbound.Legend.Top = true
	outbound.Y.Min, outbound.Y.Max = 0, ymax

	rows := [][]*plot.Plot{{outbound}}
	seconds := 0.0
	if c != nil {
		balance, err := panel("C: retry budget balance (tokens, sampled each second)", "tokens", sc.FaultSeconds, c.Series.BudgetTokens, 1)
		if err != nil {
			return err
		}
		denials, err := panel("C: retries the budget refused, per second", "denials/s", sc.FaultSeconds, drillreport.Floats(c.Series.BudgetDenials), 0.5)
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{balance}, []*plot.Plot{denials})
	}
	for _, o := range rep.Options {
		seconds = max(seconds, float64(len(o.Series.Outbound)))
	}
	for _, row := range rows {
		row[0].X.Min, row[0].X.Max = 0, seconds
		row[0].Y.Tick.Marker = drillreport.WholeTicks{}
		row[0].Add(plotter.NewGrid())
	}
	plots := make([]*plot.Plot, len(rows))
	for i, row := range rows {
		plots[i] = row[0]
	}
	img := vgimg.New(drillreport.StackWidth, vg.Length(3.2*float64(len(rows)))*vg.Inch)
	return drillreport.Stack(plots, vgimg.PngCanvas{Canvas: img}, path)
}

// panel is one of C's budget series over time.
func panel(title, unit string, fault float64, values []float64, offset float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the start"
	p.Y.Label.Text = unit
	// The balance may dip just below 0 (a retry is refused at a balance
	// of 0 or less), so the axis reaches below 0 when the series does.
	ymin, ymax := 0.0, 1.0
	for _, v := range values {
		ymin, ymax = min(ymin, v*1.1), max(ymax, v*1.1)
	}
	if err := shadeFault(p, fault, ymin, ymax); err != nil {
		return nil, err
	}
	xys := make(plotter.XYs, len(values))
	for i, v := range values {
		xys[i] = plotter.XY{X: float64(i) + offset, Y: v}
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color = optionColors["C"]
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Y.Min, p.Y.Max = ymin, ymax
	return p, nil
}

// shadeFault shades the fault window [0, fault) from ymin up to ymax.
func shadeFault(p *plot.Plot, fault, ymin, ymax float64) error {
	return drillreport.ShadeWindow(p, 0, fault, ymin, ymax)
}
