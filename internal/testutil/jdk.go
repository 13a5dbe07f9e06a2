package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// OpenJDK17 is Debian's OpenJDK 17 of the machine's architecture, which
// every machine running the tests has (the kernel matrix's arm64 guests
// get the arm64 package's); Temurin25 is on this machine kind only where
// the image carries it.
var OpenJDK17 = OpenJDK17Of(runtime.GOARCH)

const Temurin25 = "/usr/lib/jvm/temurin-25-jdk-amd64"

// OpenJDK17Of is where Debian's OpenJDK 17 package of arch (amd64,
// arm64) installs its home.
func OpenJDK17Of(arch string) string { return "/usr/lib/jvm/java-17-openjdk-" + arch }

// ExtraJDKsEnv names more JDK homes to test, separated by colons (e.g.
// OpenJDK 11 and 21 extracted from Debian's packages).
const ExtraJDKsEnv = "BPFPROFILER_EXTRA_JDKS"

// JDKs returns the JDKs to test: OpenJDK 17 (missing: SkipOrFail),
// Temurin 25 where the machine has it, and those of ExtraJDKsEnv (each must
// have bin/java).
func JDKs(t testing.TB) []string {
	t.Helper()
	if _, err := os.Stat(OpenJDK17); err != nil {
		SkipOrFail(t, "no OpenJDK 17: %v", err)
	}
	jdks := []string{OpenJDK17}
	if _, err := os.Stat(Temurin25); err == nil {
		jdks = append(jdks, Temurin25)
	} else {
		t.Logf("Temurin 25 not on this machine: %v", err)
	}
	for _, home := range strings.Split(os.Getenv(ExtraJDKsEnv), ":") {
		if home == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(home, "bin", "java")); err != nil {
			t.Fatalf("%s: %v", ExtraJDKsEnv, err)
		}
		jdks = append(jdks, home)
	}
	return jdks
}

// JavaWorkload returns the java arguments that run testdata/workloads'
// class name (before its own arguments): its source file, or where the
// kernel matrix's guests have it compiled (PrebuiltWorkloadsEnv), the class.
func JavaWorkload(t testing.TB, name string) []string {
	t.Helper()
	if dir := os.Getenv(PrebuiltWorkloadsEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, name+".class")); err == nil {
			return []string{"-cp", dir, name}
		}
	}
	return []string{filepath.Join(RepoRoot(t), "testdata", "workloads", name+".java")}
}
