//go:build tools

// Package kwok pins sigs.k8s.io/kwok, whose kwok binary runs the fake nodes of make sli
// (hack/sli/kwok.sh builds it; docs/sli.md). A module of its own: kwok's Kubernetes
// libraries are a release behind test/apiserver's, and the product's go.mod needs none.
package kwok

import _ "sigs.k8s.io/kwok/cmd/kwok"
