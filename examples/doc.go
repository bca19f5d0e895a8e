// Package examples holds example configurations that tests start as they
// are: production/itogate.yaml is README.md's "Run it for real", driven to one
// allowed admission by production_test.go.
package examples
