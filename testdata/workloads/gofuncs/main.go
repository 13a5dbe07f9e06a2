// gofuncs holds Go functions of each shape a duration probe meets: a
// method with a pointer receiver and a defer (two returns), generic
// instantiations, a method of a generic type, a closure, recursion, a frame larger than a page (two
// stack checks), a leaf without a stack check, a switch compiled to a jump
// table, and a function that only panics (no return).
package main

import (
	"fmt"
	"os"
	"strconv"
)

type Server struct{ n int }

//go:noinline
func (s *Server) handle(x int) int {
	if x > 10 {
		return x * s.n
	}
	defer func() { s.n++ }()
	return s.n + x
}

type number interface{ ~int | ~float64 }

//go:noinline
func Sum[T number](xs []T) T {
	var t T
	for _, x := range xs {
		t += x
	}
	return t
}

type Stack[T any] struct{ items []T }

//go:noinline
func (s *Stack[T]) Push(x T) int {
	s.items = append(s.items, x)
	return len(s.items)
}

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

//go:noinline
func big(n int) int {
	var a [20000]byte
	a[n%len(a)] = 1
	return int(a[n/2%len(a)])
}

//go:noinline
func leaf(a, b int) int { return a*b + 1 }

//go:noinline
func table(n int) string {
	switch n {
	case 0:
		return "zero"
	case 1:
		return "one"
	case 2:
		return "two"
	case 3:
		return "three"
	case 4:
		return "four"
	case 5:
		return "five"
	case 6:
		return "six"
	case 7:
		return "seven"
	case 8:
		return "eight"
	case 9:
		return "nine"
	}
	return strconv.Itoa(n)
}

//go:noinline
func apply(f func(int) int, n int) int { return f(n) }

//go:noinline
func boom(s string) { panic(s) }

func main() {
	s := &Server{n: 3}
	add := func(a int) int { return a + s.n }
	n := len(os.Args)
	st := &Stack[int]{}
	st.Push(n)
	fmt.Println(s.handle(n), Sum([]int{1, n}), Sum([]float64{1.5}), fib(n+10), big(n), leaf(n, 2), table(n), apply(add, n))
	if n > 5 {
		boom("many arguments")
	}
}
