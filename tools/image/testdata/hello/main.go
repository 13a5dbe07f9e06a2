// The test binary of the image tests: compiled for each platform.
package main

func main() {}
