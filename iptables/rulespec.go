package iptables

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Tokens splits a rule like a shell: double-quoted parts are one token, without quotes.
func Tokens(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && inQuote:
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote = !inQuote
			have = true
		case (c == ' ' || c == '\t') && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// Target returns a rule's -j or -g target ("" if none).
func Target(toks []string) string {
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == "-j" || toks[i] == "-g" || toks[i] == "--jump" || toks[i] == "--goto" {
			return toks[i+1]
		}
	}
	return ""
}

// SameRule reports whether two rule specs mean the same, so that a rule as written and as
// -save prints it compare equal on both backends.
func SameRule(a, b string) bool { return Normalize(a) == Normalize(b) }

// Normalize reduces a rule spec to what it means: its options with their values, "!"
// kept, module loads (-m) dropped, long option names shortened, addresses as masked
// prefixes, lists and options sorted.
func Normalize(spec string) string {
	toks := Tokens(spec)
	var opts []string
	neg := false
	for i := 0; i < len(toks); {
		t := toks[i]
		if t == "!" {
			neg = true
			i++
			continue
		}
		name := t
		i++
		var vals []string
		for i < len(toks) && toks[i] != "!" && !isOption(toks[i]) {
			vals = append(vals, toks[i])
			i++
		}
		if name == "-m" || name == "--match" {
			neg = false
			continue
		}
		name = shortOption(name)
		for j, v := range vals {
			vals[j] = normalValue(name, v)
		}
		o := name + "=" + strings.Join(vals, " ")
		if neg {
			o = "!" + o
			neg = false
		}
		opts = append(opts, o)
	}
	sort.Strings(opts)
	return strings.Join(opts, "\x00")
}

func shortOption(name string) string {
	switch name {
	case "--jump":
		return "-j"
	case "--goto":
		return "-g"
	case "--source", "--src":
		return "-s"
	case "--destination", "--dst":
		return "-d"
	case "--protocol":
		return "-p"
	case "--destination-port":
		return "--dport"
	}
	return name
}

func isOption(t string) bool {
	return len(t) > 1 && t[0] == '-' && (t[1] < '0' || t[1] > '9')
}

func normalValue(opt, v string) string {
	switch opt {
	case "-s", "-d", "--ctorigdst", "--ctorigsrc":
		if p, err := netip.ParsePrefix(v); err == nil {
			return UnmapPrefix(p).String()
		}
		if a, err := netip.ParseAddr(v); err == nil {
			a = a.Unmap()
			return netip.PrefixFrom(a, a.BitLen()).String()
		}
	case "--probability":
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return strconv.FormatFloat(f, 'f', 8, 64)
		}
	case "--ctstate", "--state":
		parts := strings.Split(v, ",")
		sort.Strings(parts)
		return strings.Join(parts, ",")
	case "-p":
		return strings.ToLower(v)
	}
	return v
}

// UnmapPrefix returns p masked, an IPv4-mapped IPv6 prefix as the IPv4 prefix it stands for.
func UnmapPrefix(p netip.Prefix) netip.Prefix {
	bits := p.Bits()
	if p.Addr().Is4In6() && bits >= 96 {
		bits -= 96
	}
	return netip.PrefixFrom(p.Addr().Unmap(), bits).Masked()
}
