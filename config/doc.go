// Package config decides what kvgate runs with: one Config, layered from
// defaults < YAML file < environment (KVGATE_ prefix, "__" for nesting) <
// command-line flags, and validated as a whole.
//
// Defaults live here and only here. The README's configuration reference is
// generated from the same struct tags (Reference) and a test keeps the two in
// step, so the documentation cannot drift from the code.
//
// The package refuses to guess: an unknown key is an error naming its path,
// and Validate reports every problem at once, each with its key path, so an
// operator fixes a bad file in one round trip instead of one error at a time.
package config
