package tui

import (
	"math"
	"strconv"
	"strings"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// CheckValue is a region check's latest value as people read it; "-"
// without one.
func CheckValue(c *ctrlv1.RegionCheck) string {
	if !c.HasValue {
		return "-"
	}
	return num(c.Value)
}

// CheckBaseline is what a region check's latest value was compared with:
// "0.002 (us-east)"; "-" without a baseline.
func CheckBaseline(c *ctrlv1.RegionCheck) string {
	if !c.HasBaseline {
		return "-"
	}
	return num(c.Baseline) + " (" + Clean(c.BaselineFrom) + ")"
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

var bars = []rune("▁▂▃▄▅▆▇█")

// Sparkline is values as a one-line chart, lowest to highest of them;
// "-" without values.
func Sparkline(values []float64) string {
	if len(values) == 0 {
		return "-"
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		lo, hi = min(lo, v), max(hi, v)
	}
	var b strings.Builder
	for _, v := range values {
		i := 0
		if hi > lo {
			i = int((v - lo) / (hi - lo) * float64(len(bars)-1))
		}
		b.WriteRune(bars[i])
	}
	return b.String()
}
