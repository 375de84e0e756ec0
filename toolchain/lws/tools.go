//go:build tools

// Package tools records the LeaderWorkerSet controller so `go mod tidy` keeps its dependencies.
package tools

import _ "sigs.k8s.io/lws/cmd"
