package config

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// A parser checks one field's value and writes it as its flag takes it. path names the field
// in errors ("ipvs.syncPeriod"); v is never nil (null means unset and is skipped earlier).
type parser func(path string, v any) (string, error)

func fieldError(path string, format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{path}, args...)...)
}

// show writes a value as the file spelled it, near enough: strings quoted, numbers and
// booleans bare, lists and mappings as JSON.
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func asString(path string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fieldError(path, "%s is not a string", show(v))
	}
	return s, nil
}

func parseString(path string, v any) (string, error) { return asString(path, v) }

func asBool(path string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fieldError(path, "%s is not a boolean (write true or false, without quotes)", show(v))
	}
	return b, nil
}

func parseBool(path string, v any) (string, error) {
	b, err := asBool(path, v)
	return strconv.FormatBool(b), err
}

// asDuration reads a Go duration string ("30s", "1m30s"); negative durations are errors.
func asDuration(path string, v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fieldError(path, "%s is not a duration (write a string such as \"30s\")", show(v))
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fieldError(path, "%q is not a duration (e.g. \"30s\", \"1m30s\")", s)
	}
	if d < 0 {
		return 0, fieldError(path, "%q must not be negative", s)
	}
	return d, nil
}

func parseDuration(path string, v any) (string, error) {
	d, err := asDuration(path, v)
	return d.String(), err
}

func parsePositiveDuration(path string, v any) (string, error) {
	d, err := asDuration(path, v)
	if err == nil {
		if bad := checkPositive(d); bad != nil {
			err = fieldError(path, "%s %v", show(v), bad)
		}
	}
	return d.String(), err
}

// parseCount reads a whole number that is not negative.
func parseCount(path string, v any) (string, error) {
	num, ok := v.(json.Number)
	if !ok {
		return "", fieldError(path, "%s is not a number", show(v))
	}
	n, err := strconv.Atoi(num.String())
	if err != nil || n < 0 {
		return "", fieldError(path, "%s must be a whole number, 0 or more", show(v))
	}
	return strconv.Itoa(n), nil
}

// parseInt32Count reads a whole number from 0 to 2^31-1, a kube-proxy int32 that must not
// be negative.
func parseInt32Count(path string, v any) (string, error) {
	s, err := parseCount(path, v)
	if err == nil {
		if n, _ := strconv.Atoi(s); n > math.MaxInt32 {
			return "", fieldError(path, "%s is above %d", show(v), math.MaxInt32)
		}
	}
	return s, err
}

func parseOOMScoreAdj(path string, v any) (string, error) {
	num, ok := v.(json.Number)
	n, err := strconv.Atoi(num.String())
	if !ok || err != nil {
		return "", fieldError(path, "%s is not a whole number", show(v))
	}
	if err := checkOOMScoreAdj(n); err != nil {
		return "", fieldError(path, "%d %v", n, err)
	}
	return strconv.Itoa(n), nil
}

func parseLogFormat(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if err := checkLogFormat(s); err != nil {
		return "", fieldError(path, "%q: kube-ipvs writes text or json (kube-proxy's JSON lines); %v", s, err)
	}
	return s, nil
}

func parseScheduler(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if err := CheckScheduler(s); err != nil {
		return "", fieldError(path, "%q is %v", s, err)
	}
	return s, nil
}

// asList reads a YAML list of strings.
func asList(path string, v any) ([]string, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fieldError(path, "%s is not a list (write [a, b] or one \"- a\" line per entry)", show(v))
	}
	out := make([]string, 0, len(l))
	for i, e := range l {
		s, err := asString(fmt.Sprintf("%s[%d]", path, i), e)
		if err != nil {
			return nil, err
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out, nil
}

// indexed names the entries of the list at path in errors: path[i].
func indexed(path string) func(i int) string {
	return func(i int) string { return fmt.Sprintf("%s[%d]", path, i) }
}

// cidrListOf makes the parser of a YAML list of CIDRs that check accepts: the file gives
// the flag the list comma-joined.
func cidrListOf(check func(l []string, where func(i int) string) ([]netip.Prefix, error)) parser {
	return func(path string, v any) (string, error) {
		l, err := asList(path, v)
		if err != nil {
			return "", err
		}
		if _, err := check(l, indexed(path)); err != nil {
			return "", err
		}
		return strings.Join(l, ","), nil
	}
}

var (
	parseCIDRList = cidrListOf(cidrs)
	// parseServiceCIDRs reads the Service CIDRs, none a whole address family.
	parseServiceCIDRs = cidrListOf(serviceCIDRs)
)

// parseNodePortAddresses reads CIDRs, or kube-proxy's single special value "primary".
func parseNodePortAddresses(path string, v any) (string, error) {
	l, err := asList(path, v)
	if err != nil {
		return "", err
	}
	if _, _, err := nodePortAddresses(l, indexed(path)); err != nil {
		return "", err
	}
	return strings.Join(l, ","), nil
}

// parseClusterCIDR reads one CIDR, or a comma-separated dual-stack pair, as kube-proxy does.
func parseClusterCIDR(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil || strings.TrimSpace(s) == "" {
		return "", err
	}
	parts := strings.Split(s, ",")
	var fams []bool
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
		p, err := parseCIDR(parts[i])
		if err != nil {
			return "", fieldError(path, "%v; a dual-stack pair is written 10.244.0.0/16,fd00:10:244::/56", err)
		}
		fams = append(fams, p.Addr().Is4())
	}
	if len(parts) > 2 || (len(parts) == 2 && fams[0] == fams[1]) {
		return "", fieldError(path, "%q: want one CIDR, or one IPv4 and one IPv6 CIDR", s)
	}
	return strings.Join(parts, ","), nil
}

// parsePortRange reads LOW-HIGH.
func parsePortRange(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	l, h, err := portRange(s)
	if err != nil {
		return "", fieldError(path, "%q: %v", s, err)
	}
	return fmt.Sprintf("%d-%d", l, h), nil
}

// parseInterfaceName checks a Linux interface name: 1 to 15 bytes, no '/', ':' or spaces.
func parseInterfaceName(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if s == "" || len(s) > 15 || strings.ContainsAny(s, "/: \t\n") || s == "." || s == ".." {
		return "", fieldError(path, "%q is not a Linux interface name (1 to 15 characters, no '/', ':' or spaces)", s)
	}
	return s, nil
}

func parseVIPBinding(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if _, err := dummyif.ParseBinding(s); err != nil {
		return "", fieldError(path, "%q: %v", s, err)
	}
	return s, nil
}

// parseRateEstimation takes kernel, on or off; YAML reads an unquoted on or off as a boolean,
// which means the same.
func parseRateEstimation(path string, v any) (string, error) {
	if b, ok := v.(bool); ok {
		if b {
			return string(sysctl.RateEstimationOn), nil
		}
		return string(sysctl.RateEstimationOff), nil
	}
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if _, err := sysctl.ParseRateEstimation(s); err != nil {
		return "", fieldError(path, "%q: %v", s, err)
	}
	return s, nil
}

func parseHostname(path string, v any) (string, error) {
	s, err := asString(path, v)
	// Node names are lower case; kube-proxy lower-cases the override too.
	return strings.ToLower(strings.TrimSpace(s)), err
}

func parseLogLevel(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if _, err := parseLevel(s); err != nil {
		return "", fieldError(path, "%q is %v", s, err)
	}
	return s, nil
}

// bindAddress reads a server address: IP:PORT, [IPv6]:PORT, :PORT, or a bare IP that gets
// defaultPort (kube-proxy accepts bare IPs the same way). "" means no server.
func bindAddress(defaultPort string) parser {
	return func(path string, v any) (string, error) {
		s, err := asString(path, v)
		if err != nil {
			return "", err
		}
		s = strings.TrimSpace(s)
		if s == "" {
			return "", nil
		}
		bare := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		if a, err := netip.ParseAddr(bare); err == nil {
			return net.JoinHostPort(a.String(), defaultPort), nil
		}
		host, port, err := net.SplitHostPort(s)
		if err == nil && host != "" {
			_, err = netip.ParseAddr(host)
		}
		if err == nil {
			var p uint64
			p, err = strconv.ParseUint(port, 10, 16)
			if err == nil && p == 0 {
				err = strconv.ErrRange
			}
		}
		if err != nil {
			return "", fieldError(path, "%q: want IP:PORT (e.g. 0.0.0.0:%s or [::]:%s), :PORT or a bare IP", s, defaultPort, defaultPort)
		}
		return s, nil
	}
}

// parseQPS reads a rate of API requests: a number, 0 or more.
func parseQPS(path string, v any) (string, error) {
	num, ok := v.(json.Number)
	if !ok {
		return "", fieldError(path, "%s is not a number", show(v))
	}
	f, err := strconv.ParseFloat(num.String(), 32)
	if err != nil || f < 0 {
		return "", fieldError(path, "%s must be a number, 0 or more", show(v))
	}
	return strconv.FormatFloat(f, 'g', -1, 32), nil
}

// parseInterfacePrefix checks the start of Linux interface names: iptables matches it as
// PREFIX+, which must fit the 15 bytes of a name.
func parseInterfacePrefix(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if err := checkInterfacePrefix(s); err != nil {
		return "", fieldError(path, "%q %v", s, err)
	}
	return s, nil
}

func parseDetectLocalMode(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	if _, err := detectLocalMode(s); err != nil {
		return "", fieldError(path, "%q: %v", s, err)
	}
	return s, nil
}

// parseMasqueradeBit reads a bit number; see masqueradeMark.
func parseMasqueradeBit(path string, v any) (string, error) {
	num, ok := v.(json.Number)
	if !ok {
		return "", fieldError(path, "%s is not a number", show(v))
	}
	n, err := strconv.Atoi(num.String())
	if err != nil {
		return "", fieldError(path, "%s is not a whole number", show(v))
	}
	if _, err := masqueradeMark(n); err != nil {
		return "", fieldError(path, "%d: %v", n, err)
	}
	return strconv.Itoa(n), nil
}

// parseBindAddress reads kube-proxy's bindAddress, an IP; 0.0.0.0 and :: mean unset.
func parseBindAddress(path string, v any) (string, error) {
	s, err := asString(path, v)
	if err != nil {
		return "", err
	}
	a, err := primaryNodeIP(s)
	if err != nil {
		return "", fieldError(path, "%q: %v", s, err)
	}
	if !a.IsValid() {
		return "", nil
	}
	return a.String(), nil
}
