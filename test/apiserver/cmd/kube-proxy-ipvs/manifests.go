package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// objects are what a manifests folder holds, in the kinds the proxier is fed.
type objects struct {
	services []*v1.Service
	slices   []*discoveryv1.EndpointSlice
	nodes    []*v1.Node
}

// loadManifests reads every .yaml, .yml and .json file of path (a file or a folder, files in
// name order) the way kube-ipvs run --manifests does, so both proxies get the same objects.
// Objects of other kinds are refused: a silently dropped object would make the parity
// comparison lie.
func loadManifests(path string) (objects, error) {
	var all objects
	files, err := manifestFiles(path)
	if err != nil {
		return all, err
	}
	for _, f := range files {
		if err := decodeFile(f, &all); err != nil {
			return all, fmt.Errorf("%s: %w", f, err)
		}
	}
	return all, nil
}

func manifestFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

func decodeFile(file string, into *objects) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 || bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return err
		}
		switch o := obj.(type) {
		case *v1.Service:
			into.services = append(into.services, o)
		case *discoveryv1.EndpointSlice:
			into.slices = append(into.slices, o)
		case *v1.Node:
			into.nodes = append(into.nodes, o)
		default:
			return fmt.Errorf("unsupported object %T", obj)
		}
	}
}
