package manifests

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// Sync makes the clientset hold exactly objs: it creates new objects, updates changed ones
// and deletes those that are gone since prev (the previous Objects synced). Unchanged objects
// are not written, so informers see events only for what changed.
func Sync(ctx context.Context, cs kubernetes.Interface, prev, objs Objects) error {
	var errs []error
	for key, obj := range objs {
		old, had := prev[key]
		if had && reflect.DeepEqual(old, obj) {
			continue
		}
		if err := upsert(ctx, cs, obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	for key, obj := range prev {
		if _, still := objs[key]; still {
			continue
		}
		if err := remove(ctx, cs, obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

func upsert(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Service:
		return createOrUpdate(ctx, cs.CoreV1().Services(o.Namespace), o.DeepCopy())
	case *discoveryv1.EndpointSlice:
		return createOrUpdate(ctx, cs.DiscoveryV1().EndpointSlices(o.Namespace), o.DeepCopy())
	case *corev1.Node:
		return createOrUpdate(ctx, cs.CoreV1().Nodes(), o.DeepCopy())
	case *networkingv1.ServiceCIDR:
		return createOrUpdate(ctx, cs.NetworkingV1().ServiceCIDRs(), o.DeepCopy())
	}
	return fmt.Errorf("unsupported object %T", obj)
}

// writer is the create and update half of a typed client-go client.
type writer[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

func createOrUpdate[T any](ctx context.Context, c writer[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
	}
	return err
}

func remove(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Service:
		return cs.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *discoveryv1.EndpointSlice:
		return cs.DiscoveryV1().EndpointSlices(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *corev1.Node:
		return cs.CoreV1().Nodes().Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *networkingv1.ServiceCIDR:
		return cs.NetworkingV1().ServiceCIDRs().Delete(ctx, o.Name, metav1.DeleteOptions{})
	}
	return fmt.Errorf("unsupported object %T", obj)
}
