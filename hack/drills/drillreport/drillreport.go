// Package drillreport is the format the drills' reports share: report.json
// indented with each per-second series on one line, and the plot's pieces
// (a shaded trigger window, per-second lines, whole-number ticks).
package drillreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"regexp"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// numberList is a JSON array of numbers as json.MarshalIndent lays it out,
// one element a line.
var numberList = regexp.MustCompile(`\[\s*-?[0-9][-+0-9.eE,\s]*\]`)

// EncodeJSON is a report's JSON: indented, each list of numbers on one line.
func EncodeJSON(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	data = numberList.ReplaceAllFunc(data, func(list []byte) []byte {
		var b bytes.Buffer
		if json.Compact(&b, list) != nil {
			return list
		}
		return b.Bytes()
	})
	return append(data, '\n'), nil
}

// WindowColor shades a trigger's window.
var WindowColor = color.RGBA{R: 250, G: 215, B: 215, A: 255}

// ShadeWindow shades [from, to) from ymin up to ymax.
func ShadeWindow(p *plot.Plot, from, to, ymin, ymax float64) error {
	poly, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: ymin}, {X: to, Y: ymin}, {X: to, Y: ymax}, {X: from, Y: ymax}})
	if err != nil {
		return err
	}
	poly.Color = WindowColor
	poly.LineStyle.Width = 0
	p.Add(poly)
	return nil
}

// WindowSwatch is a shaded window's legend entry.
func WindowSwatch() plot.Thumbnailer {
	poly, _ := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}, {X: 1, Y: 1}})
	poly.Color = WindowColor
	poly.LineStyle.Width = 0
	return poly
}

// WholeTicks labels an axis in whole numbers (or tenths, for a short one).
type WholeTicks struct{}

// Ticks implements plot.Ticker.
func (WholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	format := "%.0f"
	if hi-lo < 5 {
		format = "%.1f"
	}
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = fmt.Sprintf(format, ticks[i].Value)
		}
	}
	return ticks
}

// PerSecond places each 1 s bucket's count at the bucket's middle.
func PerSecond(values []int) plotter.XYs {
	xys := make(plotter.XYs, len(values))
	for i, v := range values {
		xys[i] = plotter.XY{X: float64(i) + 0.5, Y: float64(v)}
	}
	return xys
}

// Floats converts counts for a plot.
func Floats(v []int) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// StackWidth is a stacked figure's width.
const StackWidth = 11 * vg.Inch

// Stack draws plots one under another on c, a canvas StackWidth wide, and
// writes it to path (as PNG or SVG, whichever c is).
func Stack(plots []*plot.Plot, c interface {
	vg.CanvasSizer
	io.WriterTo
}, path string) error {
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(rows, tiles, draw.New(c))
	for i, row := range rows {
		row[0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
