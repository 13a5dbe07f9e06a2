// Package bpf holds the BPF C sources of bpfprofiler and the Go bindings
// bpf2go generates from them. The generated *_bpfel.go and *_bpfel.o files are
// committed, so building the module needs no clang; `go generate ./bpf/`
// regenerates them (clang 14+, libbpf headers in /usr/include/bpf).
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type stack_key -type thread_comm -type sampler_config -type sampler_stats -type inflight_seq -type unwind_mapping_key -type unwind_mapping -type python_proc -type ruby_proc -type php_proc -type hotspot_proc -type v8_proc -type open_scope -type context_proc -type thread_ctx_proc -type go_labels_proc Cpu cpu.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type offcpu_start -type offcpu_pending Offcpu offcpu.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type offcpu_sleep OffcpuSwitchout offcpu_switchout.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type probe_config -type probe_record -type probe_stack_record -type probe_stats -type probe_drops -type probe_args -type usdt_args_spec -type usdt_arg_spec Probe probe.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type alloc_event -type alloc_go_proc -type alloc_stats -type usdt_args_spec -type usdt_arg_spec Alloc alloc.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type selftest_result Selftest selftest.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type readbench_result -type thread_ctx_proc -type go_labels_proc -type context_proc Readbench readbench.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type ruby_proc -type rubywalk_record Rubywalk rubywalk.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -go-package bpf -target amd64,arm64 -type php_proc -type php_walk_record -type php_walk_input Phpwalk phpwalk.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Wpadded -Werror
