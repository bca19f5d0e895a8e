package policy

// InputValue exposes inputValue to the external tests.
var InputValue = inputValue

// Prepare exposes prepare (how an Engine compiles each query) to the
// external benchmarks.
var Prepare = prepare
