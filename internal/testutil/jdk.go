package testutil

import (
	"os"
	"testing"
)

// OpenJDK17 is Debian's OpenJDK 17, which every machine running the tests
// has; Temurin25 is on this machine kind only where the image carries it.
const (
	OpenJDK17 = "/usr/lib/jvm/java-17-openjdk-amd64"
	Temurin25 = "/usr/lib/jvm/temurin-25-jdk-amd64"
)

// JDKs returns the JDKs to test: OpenJDK 17 (missing: SkipOrFail) and
// Temurin 25 where the machine has it.
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
	return jdks
}
