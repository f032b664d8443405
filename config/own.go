package config

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// fileOptions are the options a KubeIPVSConfiguration sets, one field each: optionTable's
// rows with a field. deploy/configmap.yaml documents every field.
var fileOptions = func() []option {
	var l []option
	for _, opt := range optionTable {
		if opt.field != "" {
			l = append(l, opt)
		}
	}
	return l
}()

// orEmpty also takes "", a setting left empty (the field's default).
func orEmpty(p parser) parser {
	return func(path string, v any) (string, error) {
		if v == "" {
			return "", nil
		}
		return p(path, v)
	}
}

func defaultPort(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(fmt.Sprintf("config: default address %q has no port", addr))
	}
	return port
}

// FieldNames lists the fields of KubeIPVSConfiguration (besides apiVersion and kind), in the
// order of their flags in `kube-ipvs run --help`.
func FieldNames() []string {
	names := make([]string, len(fileOptions))
	for i, opt := range fileOptions {
		names[i] = opt.field
	}
	return names
}

// parseOwn reads a KubeIPVSConfiguration. Every problem is reported, not just the first.
func parseOwn(doc map[string]any) (*Settings, []string, error) {
	s := &Settings{Kind: Kind, Values: map[string]string{}}
	var problems []string
	for _, name := range sortedKeys(doc) {
		if name == "apiVersion" || name == "kind" {
			continue
		}
		i := slices.IndexFunc(fileOptions, func(opt option) bool { return opt.field == name })
		if i < 0 {
			problems = append(problems, unknownOwnField(name))
			continue
		}
		v := doc[name]
		if v == nil {
			continue // null: as if left out
		}
		val, err := fileOptions[i].parse(name, v)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		s.Values[fileOptions[i].flag] = val
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return s, nil, nil
}

// unknownOwnField names an unknown field and, when it differs from a real one only in case
// or in its dashes (a flag name), suggests that one.
func unknownOwnField(name string) string {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "-", "")) }
	for _, opt := range fileOptions {
		if norm(opt.field) == norm(name) || opt.flag == name {
			return fmt.Sprintf("unknown field %q (did you mean %q?)", name, opt.field)
		}
	}
	return fmt.Sprintf("unknown field %q (%s fields: %s)", name, Kind, strings.Join(FieldNames(), ", "))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
