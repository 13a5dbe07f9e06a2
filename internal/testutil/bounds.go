package testutil

// OutsideBy is how far got lies outside [low, high], relative to the bound it
// passed: 0 inside, (got-high)/high above (positive), (got-low)/low below
// (negative). It checks a figure a workload can only bound, such as a
// thread's blocked time seen through its own clocks.
func OutsideBy(got, low, high float64) float64 {
	switch {
	case got > high:
		return (got - high) / high
	case got < low:
		return (got - low) / low
	}
	return 0
}
