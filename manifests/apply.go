package manifests

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
		c := cs.CoreV1().Services(o.Namespace)
		if _, err := c.Create(ctx, o.DeepCopy(), metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = c.Update(ctx, o.DeepCopy(), metav1.UpdateOptions{})
			return err
		} else {
			return err
		}
	case *discoveryv1.EndpointSlice:
		c := cs.DiscoveryV1().EndpointSlices(o.Namespace)
		if _, err := c.Create(ctx, o.DeepCopy(), metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = c.Update(ctx, o.DeepCopy(), metav1.UpdateOptions{})
			return err
		} else {
			return err
		}
	case *corev1.Node:
		c := cs.CoreV1().Nodes()
		if _, err := c.Create(ctx, o.DeepCopy(), metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = c.Update(ctx, o.DeepCopy(), metav1.UpdateOptions{})
			return err
		} else {
			return err
		}
	}
	return fmt.Errorf("unsupported object %T", obj)
}

func remove(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Service:
		return cs.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *discoveryv1.EndpointSlice:
		return cs.DiscoveryV1().EndpointSlices(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *corev1.Node:
		return cs.CoreV1().Nodes().Delete(ctx, o.Name, metav1.DeleteOptions{})
	}
	return fmt.Errorf("unsupported object %T", obj)
}
