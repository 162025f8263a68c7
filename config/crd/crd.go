// Package crd holds the generated CustomResourceDefinitions, embedded from
// their one home (bases/, which make manifests writes), for the code that
// evaluates them offline (internal/crdvalidation).
package crd

import "embed"

// Bases holds bases/*.yaml, one CustomResourceDefinition a file.
//
//go:embed bases/*.yaml
var Bases embed.FS
