package webhook_test

import (
	"io/fs"

	"github.com/itocompute/itogate/policies"
)

func policiesFile(name string) ([]byte, error) { return fs.ReadFile(policies.Bundle(), name) }
