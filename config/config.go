// Package config holds the settings of `kube-ipvs run` (Options) and reads the file given to
// `kube-ipvs run --config FILE`.
//
// The file is either kube-ipvs's own KubeIPVSConfiguration (apiVersion kube-ipvs.io/v1alpha1),
// whose fields mirror the run flags one to one, or a kube-proxy KubeProxyConfiguration
// (apiVersion kubeproxy.config.k8s.io/v1alpha1), so that a cluster moving off kube-proxy's IPVS
// mode can point kube-ipvs at the file it already has. Either way the result is a set of flag
// values, and flags given on the command line win over the file:
//
//	var o config.Options
//	o.AddFlags(fs)
//	if err := fs.Parse(args); err != nil { ... }
//	warnings, err := o.ReadConfigFile(fs) // Load and ApplyToFlags, before anything reads o
//	if err != nil { ... exit 2 ... }
//	parsed, err := o.Validate()           // the one check, whichever source a value came from
//	if err != nil { ... exit 2 ... }
//	// log the warnings once the logger exists: log-level may come from the file
//
// Invalid values are errors that name the field path (`ipvs.syncPeriod: "3x" is not a
// duration`). An unknown field is an error in kube-ipvs's own format (a typo must not pass
// silently) and a warning in a kube-proxy file, whose fields vary between versions.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// The kinds this package reads.
const (
	APIVersion = "kube-ipvs.io/v1alpha1"
	Kind       = "KubeIPVSConfiguration"

	KubeProxyAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	KubeProxyKind       = "KubeProxyConfiguration"
)

// Names of run flags the configuration file sets; Options.AddFlags defines them.
const (
	FlagClusterCIDR   = "cluster-cidr"   // the Pods' CIDR (a dual-stack pair comma-separated)
	FlagMasqueradeAll = "masquerade-all" // SNAT all traffic to Service addresses
	FlagExcludeCIDRs  = "exclude-cidrs"  // virtual servers and addresses in these CIDRs are never cleaned up
	FlagServiceCIDR   = "service-cidr"   // the Service CIDRs when the API has no ServiceCIDR objects
	// FlagCleanupKubeProxy removes kube-proxy's leftovers after the first full sync.
	FlagCleanupKubeProxy = "cleanup-kube-proxy"
)

// kube-proxy's keywords in nodePortAddresses (and --nodeport-addresses), besides CIDRs.
const (
	// NodePortAddressesPrimary: the Node object's primary IPs (its InternalIPs).
	NodePortAddressesPrimary = "primary"
	// NodePortAddressesAll: every usable node address, as an empty list.
	NodePortAddressesAll = "all"
	// NodePortAddressesLocalhost (127.0.0.0/8 and ::1) is refused: IPVS cannot serve it.
	NodePortAddressesLocalhost = "localhost"
)

// Settings are the values a configuration file gives to `kube-ipvs run` flags.
type Settings struct {
	// Kind is the file's kind: Kind or KubeProxyKind.
	Kind string
	// Values maps a run flag's name (e.g. "sync-period") to the value the file gives it,
	// written as it would be on the command line ("30s"; lists comma-joined; booleans "true"
	// or "false"). A field the file leaves out, or sets to null, has no entry. For a
	// kube-proxy file a zero value ("", 0s, false) also has no entry, because kube-proxy
	// reads zero as "use the default" too.
	Values map[string]string
}

// FlagNames lists every run flag a configuration file can set, sorted. `kube-ipvs run` must
// define all of them; a test there can check it.
func FlagNames() []string {
	var names []string
	for _, opt := range fileOptions {
		names = append(names, opt.flag)
	}
	slices.Sort(names)
	return names
}

// Load reads and checks the configuration file at path. It returns the settings, warnings
// meant for the log (one line each), and an error naming the file and every invalid field.
func Load(path string) (*Settings, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	s, warnings, err := Parse(data)
	if err != nil {
		return nil, warnings, fmt.Errorf("config %s: %w", path, err)
	}
	return s, warnings, nil
}

// Parse is Load for a file's contents.
func Parse(data []byte) (*Settings, []string, error) {
	if n := countDocuments(data); n > 1 {
		return nil, nil, fmt.Errorf("the file holds %d YAML documents; want exactly one", n)
	}
	doc, err := decode(data, false)
	if err != nil {
		return nil, nil, err
	}
	if doc == nil {
		return nil, nil, fmt.Errorf("the file is empty; want a %s (apiVersion %s) or a %s", Kind, APIVersion, KubeProxyKind)
	}
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	switch kind {
	case Kind:
		if apiVersion != APIVersion {
			return nil, nil, fmt.Errorf("apiVersion %q: kind %s wants apiVersion %s", apiVersion, Kind, APIVersion)
		}
		// Duplicate keys are mistakes too: the later one would win silently.
		if _, err := decode(data, true); err != nil {
			return nil, nil, err
		}
		return parseOwn(doc)
	case KubeProxyKind:
		if apiVersion != KubeProxyAPIVersion {
			return nil, nil, fmt.Errorf("apiVersion %q: kube-ipvs reads kube-proxy configurations of apiVersion %s", apiVersion, KubeProxyAPIVersion)
		}
		var warnings []string
		if _, err := decode(data, true); err != nil {
			// kube-proxy itself falls back to lenient decoding here, with a warning.
			warnings = append(warnings, "kube-proxy configuration: "+err.Error()+" (the last value is used)")
		}
		s, more, err := parseKubeProxy(doc)
		return s, append(warnings, more...), err
	case "ConfigMap":
		return nil, nil, errors.New("kind ConfigMap: give the configuration file the ConfigMap holds (mount the ConfigMap and pass the file's path), not the ConfigMap itself")
	case "":
		return nil, nil, fmt.Errorf("no kind: want kind %s (apiVersion %s) or %s (apiVersion %s)", Kind, APIVersion, KubeProxyKind, KubeProxyAPIVersion)
	default:
		return nil, nil, fmt.Errorf("kind %q: want %s (apiVersion %s) or %s (apiVersion %s)", kind, Kind, APIVersion, KubeProxyKind, KubeProxyAPIVersion)
	}
}

// ApplyToFlags sets every flag the file gives a value to, unless the command line set it
// already (fs.Changed): the command line overrides the file. Call it after fs.Parse and
// before reading the flags' variables; afterwards fs.Changed is true for the flags the file
// set too. A value for a flag fs does not define is an error, so a setting is never dropped
// silently.
func ApplyToFlags(s *Settings, fs *pflag.FlagSet) error {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.Values))
	for name := range s.Values {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if fs.Lookup(name) == nil {
			return fmt.Errorf("config: the file sets %s, but this command has no --%s flag", name, name)
		}
		if fs.Changed(name) {
			continue
		}
		if err := fs.Set(name, s.Values[name]); err != nil {
			return fmt.Errorf("config: --%s=%q: %w", name, s.Values[name], err)
		}
	}
	return nil
}

// decode turns YAML (or JSON) into plain values: map[string]any, []any, string, bool,
// json.Number and nil. strict rejects duplicate keys.
func decode(data []byte, strict bool) (map[string]any, error) {
	conv := yaml.YAMLToJSON
	if strict {
		conv = yaml.YAMLToJSONStrict
	}
	j, err := conv(data)
	if err != nil {
		// One line: the YAML library lists its errors on several.
		return nil, fmt.Errorf("not valid YAML: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the file holds %s; want a mapping of fields", show(v))
	}
	return m, nil
}

var docSeparator = regexp.MustCompile(`^---(\s.*)?$`)

// countDocuments counts the YAML documents that hold something other than comments: the YAML
// decoder reads only the first and would ignore the rest silently.
func countDocuments(data []byte) int {
	n, content := 0, false
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		if docSeparator.MatchString(line) {
			if content {
				n++
			}
			content = false
			continue
		}
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") && t != "..." {
			content = true
		}
	}
	if content {
		n++
	}
	return n
}
