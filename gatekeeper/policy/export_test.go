package policy

// InputValue exposes inputValue to the external tests.
var InputValue = inputValue
