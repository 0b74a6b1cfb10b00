package operator

import (
	"fmt"
	"strconv"
	"time"
)

// The dashboard's charts are SVG drawn on the server: stacked bars, one per bucket, one color per
// series. No JavaScript, no external assets; each bar has a <title> the browser shows on hover.

// Chart geometry, in SVG user units.
const (
	chartWidth  = 480.0
	chartHeight = 150.0
	chartTop    = 14.0 // room for the scale label
	chartBottom = 18.0 // room for the time axis
	chartLeft   = 0.0
)

// seriesClass maps a series to its CSS class (colors live in admin.css).
var seriesClass = map[string]string{
	"accepted": "s-accepted", "continued": "s-continued", "duplicate": "s-duplicate",
	"non-work": "s-nonwork", "failed": "s-failed",
}

type chartRect struct {
	X, Y, W, H float64
	Class      string
}

type chartBar struct {
	Rects []chartRect
	// Hit is the whole column, carrying the tooltip.
	Hit   chartRect
	Title string
}

type chartLabel struct {
	X, Y   float64
	Text   string
	Anchor string
}

type chart struct {
	Width, Height float64
	Bars          []chartBar
	Labels        []chartLabel
	Baseline      float64
	GridY         float64
	Max           int64
	Empty         bool
	Legend        []legendItem
}

type legendItem struct{ Name, Class string }

// drawChart lays out series (equal lengths, one count per bucket starting at buckets[i]) as
// stacked bars.
func drawChart(series []Series, buckets []time.Time, width time.Duration, now time.Time) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Baseline: chartHeight - chartBottom}
	for _, s := range series {
		c.Legend = append(c.Legend, legendItem{Name: s.Name, Class: seriesClass[s.Name]})
	}
	n := len(buckets)
	if n == 0 {
		c.Empty = true
		return c
	}
	totals := make([]int64, n)
	for _, s := range series {
		for i := 0; i < n && i < len(s.Counts); i++ {
			totals[i] += s.Counts[i]
		}
	}
	for _, t := range totals {
		c.Max = max(c.Max, t)
	}
	c.Empty = c.Max == 0
	scaleMax := niceCeil(c.Max)
	plotH := c.Baseline - chartTop
	c.GridY = chartTop
	slot := (chartWidth - chartLeft) / float64(n)
	barW := slot * 0.72
	for i := range n {
		x := chartLeft + float64(i)*slot + (slot-barW)/2
		y := c.Baseline
		b := chartBar{Hit: chartRect{X: chartLeft + float64(i)*slot, Y: chartTop, W: slot, H: plotH}}
		title := buckets[i].UTC().Format("Jan 2 15:04") + "–" + buckets[i].Add(width).UTC().Format("15:04") + " UTC"
		for _, s := range series {
			v := int64(0)
			if i < len(s.Counts) {
				v = s.Counts[i]
			}
			if v > 0 {
				title += fmt.Sprintf("\n%s: %d", s.Name, v)
			}
			if v == 0 || scaleMax == 0 {
				continue
			}
			h := float64(v) / float64(scaleMax) * plotH
			h = max(h, 1.5) // a single event stays visible
			y -= h
			b.Rects = append(b.Rects, chartRect{X: x, Y: y, W: barW, H: h, Class: seriesClass[s.Name]})
		}
		if totals[i] == 0 {
			title += "\nno events"
		}
		b.Title = title
		c.Bars = append(c.Bars, b)
	}
	if scaleMax > 0 {
		c.Labels = append(c.Labels, chartLabel{X: chartWidth - 2, Y: chartTop - 4, Text: strconv.FormatInt(scaleMax, 10), Anchor: "end"})
	}
	span := now.Sub(buckets[0])
	c.Labels = append(c.Labels,
		chartLabel{X: 1, Y: chartHeight - 4, Text: "−" + shortDuration(span), Anchor: "start"},
		chartLabel{X: chartWidth / 2, Y: chartHeight - 4, Text: "−" + shortDuration(span/2), Anchor: "middle"},
		chartLabel{X: chartWidth - 1, Y: chartHeight - 4, Text: "now", Anchor: "end"},
	)
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, for a readable scale.
func niceCeil(v int64) int64 {
	if v <= 0 {
		return 0
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

// shortDuration renders d as "24h", "90m" or "45s".
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour < time.Minute:
		return strconv.Itoa(int(d.Round(time.Hour)/time.Hour)) + "h"
	case d >= time.Minute:
		return strconv.Itoa(int(d.Round(time.Minute)/time.Minute)) + "m"
	default:
		return strconv.Itoa(int(d.Round(time.Second)/time.Second)) + "s"
	}
}
