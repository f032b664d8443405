// Command kube-ipvs is an IPVS-native Kubernetes service proxy.
//
// It is one binary with subcommands; each subcommand owns its flags (spf13/pflag) so that
// `kube-ipvs <command> --help` lists exactly what that command accepts, with defaults.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand: a one-line summary and a function that parses its own
// arguments and returns the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"run":       {summary: "run the service proxy", run: runRun},
		"preflight": {summary: "check the node can run IPVS mode; exit 0 yes, 1 no", run: runPreflight},
		"cleanup":   {summary: "remove what kube-ipvs (or, with --kube-proxy, kube-proxy) left on this node", run: runCleanup},
		"list":      {summary: "print this node's IPVS table like ipvsadm -Ln, with Service and pod names and drift", run: runList},
		"explain":   {summary: "explain where traffic to one Service (NAMESPACE/NAME) goes on this node, and why", run: runExplain},
		"version":   {summary: "print the version and exit", run: runVersion},
	}
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch selects the subcommand. Usage errors exit 2, as the flag package does.
func dispatch(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout, cmds)
		return 0
	case "--version":
		return runVersion(nil, stdout, stderr)
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kube-ipvs: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

// parseArgs parses a subcommand's arguments into fs; no subcommand takes positional ones.
// When the command must not go on, ok is false and code is its exit code: 0 after --help
// (fs.Usage has printed the help), 2 on a usage error (pflag or parseArgs has printed it).
func parseArgs(fs *pflag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kube-ipvs %s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return 2, false
	}
	return 0, true
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "kube-ipvs: an IPVS-native Kubernetes service proxy")
	fmt.Fprintln(w, "\nUsage: kube-ipvs <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'kube-ipvs <command> --help' for the flags of a command.")
}

func runVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "kube-ipvs %s\n", version)
	return 0
}
