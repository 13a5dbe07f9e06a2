//go:build !cgo

package main

func cWork(n int) int { return n*2 + 1 }
