package manifests

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// selector is a List's or Watch's label and field selectors. The fields are the ones an API
// server supports for every resource: metadata.name and metadata.namespace (the proxy
// selects its own Node by name).
type selector struct {
	labels labels.Selector
	fields fields.Selector
}

func newSelector(kind string, opts metav1.ListOptions) (selector, error) {
	sel := selector{labels: labels.Everything(), fields: fields.Everything()}
	var err error
	if opts.LabelSelector != "" {
		if sel.labels, err = labels.Parse(opts.LabelSelector); err != nil {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("%s: label selector %q: %v", kind, opts.LabelSelector, err))
		}
	}
	if opts.FieldSelector != "" {
		if sel.fields, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("%s: field selector %q: %v", kind, opts.FieldSelector, err))
		}
		for _, r := range sel.fields.Requirements() {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				return sel, apierrors.NewBadRequest(fmt.Sprintf("%s: field label not supported: %s", kind, r.Field))
			}
		}
	}
	return sel, nil
}

func (s selector) matches(obj runtime.Object) bool {
	m := obj.(metav1.Object)
	if !s.labels.Empty() && !s.labels.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if s.fields.Empty() {
		return true
	}
	return s.fields.Matches(fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()})
}
