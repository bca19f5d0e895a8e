package policy

import (
	"context"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
)

// InputValue exposes inputValue to the external tests.
var InputValue = inputValue

// Compile exposes how an Engine compiles its bundle and prepares each
// query on it to the external benchmarks: the returned function prepares
// one query.
func Compile(ctx context.Context, b *bundle.Bundle) (func(query string) (rego.PreparedEvalQuery, error), error) {
	cb, err := compileBundle(ctx, b)
	if err != nil {
		return nil, err
	}
	return func(query string) (rego.PreparedEvalQuery, error) { return cb.prepare(ctx, query) }, nil
}
