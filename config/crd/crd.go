// Package crd embeds the CustomResourceDefinitions `make manifests`
// generates, so that Go code can run the very rules the API server runs.
package crd

import "embed"

// Bases holds bases/*.yaml.
//
//go:embed bases/*.yaml
var Bases embed.FS
