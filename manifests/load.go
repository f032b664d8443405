// Package manifests reads Service, EndpointSlice, ServiceCIDR and Node objects from YAML or
// JSON files (load.go) and serves them to the proxy's informers from a store of its own
// (store.go) through List and Watch (watcher.go), so the proxy runs on static manifests
// through the same informers as on a real cluster.
package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Objects is the content of a manifest set, keyed by "Kind namespace/name".
type Objects map[string]runtime.Object

// Load reads PATH: one file, or every *.yaml, *.yml and *.json file in a folder (recursively,
// in name order). Documents that cannot be parsed or are of another kind produce an error
// naming the file, document and, where known, the object; every other object is still
// returned. The error joins all problems found.
func Load(path string) (Objects, error) {
	files, err := manifestFiles(path)
	if err != nil {
		return nil, err
	}
	objs := Objects{}
	var errs []error
	for _, f := range files {
		errs = append(errs, loadFile(f, objs)...)
	}
	return objs, errors.Join(errs...)
}

func manifestFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				files = append(files, p)
			}
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

func loadFile(file string, objs Objects) []error {
	data, err := os.ReadFile(file)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", file, err)}
	}
	var errs []error
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if err == io.EOF {
				break
			}
			// The stream cannot be resynchronised after a syntax error: report and stop.
			errs = append(errs, fmt.Errorf("%s: document %d: %w", file, doc, err))
			break
		}
		raw.Raw = bytes.TrimSpace(raw.Raw)
		if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
			continue
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: document %d%s: %w", file, doc, describeRaw(raw.Raw), err))
			continue
		}
		key, err := keyOf(obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: document %d (%s): %w", file, doc, gvk.Kind, err))
			continue
		}
		if _, dup := objs[key]; dup {
			errs = append(errs, fmt.Errorf("%s: document %d: %s is defined more than once; the later one wins", file, doc, key))
		}
		objs[key] = obj
	}
	return errs
}

// keyOf accepts the kinds the proxy reads and names them. Namespaced kinds without a
// namespace get "default", as kubectl would give them.
func keyOf(obj runtime.Object) (string, error) {
	var kind string
	namespaced := true
	switch obj.(type) {
	case *corev1.Service:
		kind = "Service"
	case *discoveryv1.EndpointSlice:
		kind = "EndpointSlice"
	case *corev1.Node:
		kind, namespaced = "Node", false
	case *networkingv1.ServiceCIDR:
		kind, namespaced = "ServiceCIDR", false
	default:
		return "", fmt.Errorf("kind %T is not one the proxy reads (Service, EndpointSlice, Node, ServiceCIDR)", obj)
	}
	m := obj.(metav1.Object)
	if m.GetName() == "" {
		return "", fmt.Errorf("%s has no metadata.name", kind)
	}
	if !namespaced {
		return kind + " " + m.GetName(), nil
	}
	if m.GetNamespace() == "" {
		m.SetNamespace("default")
	}
	return kind + " " + m.GetNamespace() + "/" + m.GetName(), nil
}

// describeRaw names the object in an undecodable document, when its metadata can be read.
func describeRaw(raw []byte) string {
	var meta struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := utilyaml.Unmarshal(raw, &meta); err != nil || meta.Kind == "" {
		return ""
	}
	name := meta.Metadata.Name
	if meta.Metadata.Namespace != "" {
		name = meta.Metadata.Namespace + "/" + name
	}
	return fmt.Sprintf(" (%s %s)", meta.Kind, name)
}
