package testutil

import (
	"os"
	"strconv"
	"time"
)

// PatienceEnv names a factor (at least 1) by which tests stretch their
// waits and their workloads' run times: the kernel matrix sets it for
// guests whose emulation is slower than the host's (arm64 under TCG).
const PatienceEnv = "BPFPROFILER_PATIENCE"

// Patient returns d stretched by PatienceEnv's factor; d itself when it is
// unset or not a number of at least 1.
func Patient(d time.Duration) time.Duration {
	f, err := strconv.ParseFloat(os.Getenv(PatienceEnv), 64)
	if err != nil || f < 1 {
		return d
	}
	return time.Duration(float64(d) * f)
}
