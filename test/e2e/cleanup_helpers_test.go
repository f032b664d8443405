//go:build guest

package e2e

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/vishvananda/netlink"
)

// The four iptables tools whose state `kube-ipvs cleanup` covers.
var saveTools = []string{"iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft"}

// runCleanup runs `kube-ipvs cleanup args...` and returns its exit status and output.
func runCleanup(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"cleanup"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("kube-ipvs cleanup: %v", err)
	}
	t.Logf("kube-ipvs cleanup %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

// mustRun runs a tool, with stdin when given, and fails the test if it fails.
func mustRun(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// saved is a tool's -save output without comments and counters, so two listings of the
// same rules compare equal.
func saved(t *testing.T, tool string) string {
	t.Helper()
	var keep []string
	for _, line := range strings.Split(mustRun(t, "", tool+"-save"), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			keep = append(keep, counters.ReplaceAllString(line, ""))
		}
	}
	return strings.Join(keep, "\n")
}

// linkAddrs lists a link's addresses, sorted; nil when the link does not exist.
func linkAddrs(t *testing.T, name string) []string {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil
	}
	as := guestutil.AddrList(t, l)
	out := []string{}
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out
}

// ipsetNames lists the sets, sorted.
func ipsetNames(t *testing.T) []string {
	t.Helper()
	names := strings.Fields(mustRun(t, "", "ipset", "list", "-n"))
	slices.Sort(names)
	return names
}

// nodeState is everything a cleanup could change, as text: IPVS without counters, the two
// dummy links' addresses, the sets and the four tools' rules.
func nodeState(t *testing.T) string {
	t.Helper()
	vs := strings.Split(strings.TrimSpace(mustRun(t, "", "ipvsadm", "-Sn")), "\n")
	slices.Sort(vs)
	parts := []string{strings.Join(vs, "\n"),
		"kube-ipvs0: " + strings.Join(linkAddrs(t, "kube-ipvs0"), " "),
		"foreign0: " + strings.Join(linkAddrs(t, "foreign0"), " "),
		"sets: " + strings.Join(ipsetNames(t), " ")}
	for _, tool := range saveTools {
		parts = append(parts, tool+":\n"+saved(t, tool))
	}
	return strings.Join(parts, "\n")
}

// addForeignLink adds a dummy link that is not kube-ipvs', with the given addresses. It
// stays down, as kube-ipvs0 does: its addresses are local all the same.
func addForeignLink(t *testing.T, name string, addrs ...string) {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	l, _ := netlink.LinkByName(name)
	t.Cleanup(func() { _ = netlink.LinkDel(l) })
	for _, a := range addrs {
		ip, n, err := net.ParseCIDR(a)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: n, Flags: 0x02 /* IFA_F_NODAD */}); err != nil {
			t.Fatalf("%s %s: %v", name, a, err)
		}
	}
}

// flushFirewall empties every tool's nat, filter and mangle tables and destroys every set
// when the test ends, so that what it made (or a cleanup left, if the test failed) does
// not reach the next test.
func flushFirewall(t *testing.T) {
	t.Cleanup(func() {
		for _, tool := range saveTools {
			for _, table := range []string{"nat", "filter", "mangle"} {
				_ = exec.Command(tool, "-t", table, "-F").Run()
				_ = exec.Command(tool, "-t", table, "-X").Run()
			}
		}
		_ = exec.Command("ipset", "destroy").Run()
	})
}
