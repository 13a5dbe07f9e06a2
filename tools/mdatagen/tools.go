//go:build tools

// Package tools pins mdatagen, built from this separate module so the main
// module does not inherit its dependencies.
package tools

import _ "go.opentelemetry.io/collector/cmd/mdatagen"
