package offcpu

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "zero", opts: Options{}},
		{name: "1ms", opts: Options{MinBlock: time.Millisecond, TargetPIDs: []uint32{1}, ExcludePIDs: []uint32{2}}},
		{name: "negative min_block", opts: Options{MinBlock: -1}, wantErr: "off_cpu::min_block"},
		{name: "too many targets", opts: Options{TargetPIDs: make([]uint32, MaxTargets+1)}, wantErr: "capacity"},
		{name: "too many excluded", opts: Options{ExcludePIDs: make([]uint32, MaxExcluded+1)}, wantErr: "excluded"},
	}
	for _, tt := range tests {
		err := tt.opts.validate()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want it to contain %q", tt.name, err, tt.wantErr)
		}
	}
}
