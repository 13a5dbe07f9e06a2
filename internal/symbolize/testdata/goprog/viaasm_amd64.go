package main

// callThroughABI0 is in viaasm_amd64.s.
func callThroughABI0()

// wrapped is called from assembly, through its ABI wrapper.
//
//go:noinline
func wrapped() { abiCalls++ }

var abiCalls int

// keepABI holds callThroughABI0.
var keepABI func()

// Keep callThroughABI0 (and so the wrapper) in the binary.
func init() { keepABI = callThroughABI0 }
