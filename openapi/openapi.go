// Package openapi holds kvgate's OpenAPI document, openapi.yaml, which the
// gateway serves at /openapi.yaml and the tests validate real responses
// against.
package openapi

import _ "embed"

// Spec is the OpenAPI 3 document of kvgate's HTTP API, YAML.
//
//go:embed openapi.yaml
var Spec []byte
