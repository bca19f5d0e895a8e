// Package api is itogate's contract, in one place: the actions an admission
// may ask for and what each carries and acts on, the wire types of the HTTP
// API (request, envelope, error body, admission data, finding), and every
// stable code Go produces with the one HTTP status it answers.
//
// It is a leaf: it imports nothing of itogate, so the admission pipeline,
// the ledger, the server, the webhook, the client and the CLI all read the
// same definitions instead of keeping lists that must agree. Policy codes
// live in the bundle's Rego METADATA; the ones Go also produces are listed
// here too, with the status the policy's deny answers.
package api
