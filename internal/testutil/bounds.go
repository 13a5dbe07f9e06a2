package testutil

// OutsideBy is how far got lies outside [low, high], relative to the bound it
// passed: 0 inside, (got-high)/high above (positive), (got-low)/low below
// (negative). A measurement a workload can only bound (its own clock reads
// cost time on either side) is checked with it.
func OutsideBy(got, low, high float64) float64 {
	switch {
	case got > high:
		return (got - high) / high
	case got < low:
		return (got - low) / low
	}
	return 0
}
