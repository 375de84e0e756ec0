//go:build tools

// Package tools records the etcd program so `go mod tidy` keeps its dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3"
