package introspect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/golden"
)

// marks renders each row's and real server's owner and drift mark, the decisions list
// makes, one line each.
func marks(rows []Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s owner=%s drift=%q", r.Key, r.Owner, r.Drift))
		for _, rr := range r.Reals {
			out = append(out, fmt.Sprintf("  %s drift=%q", rr.RS, rr.Drift))
		}
	}
	return out
}

func TestMergeMarksDriftOnlyOnOwnedObjects(t *testing.T) {
	doc := fixtureDoc(t)
	got := marks(Merge(fixtureKernel(), &doc, fixtureOwns))
	want := []string{
		`TCP 10.96.0.10:80 owner=kube-ipvs drift=""`,
		`  10.244.0.9:8080 drift=""`, // draining at weight 0: expected
		`  10.244.0.11:8080 drift=""`,
		`TCP 10.96.0.99:80 owner=kube-ipvs drift="unexpected"`,
		`  10.244.0.50:8080 drift="unexpected"`,
		`TCP 172.16.0.1:80 owner=foreign drift=""`,
		`  172.16.0.5:8080 drift=""`,
		`TCP 192.168.1.2:30080 owner=kube-ipvs drift=""`,
		`  10.244.0.11:8080 drift="missing"`,
		`  10.244.0.77:8080 drift="unexpected"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("marks:\n got %q\nwant %q", got, want)
	}
}

func TestMergeMarksMissingVirtualServerAndSpecDrift(t *testing.T) {
	doc := fixtureDoc(t)
	kernel := fixtureKernel()[:1]
	kernel[0].Scheduler = "wlc"
	got := marks(Merge(kernel, &doc, fixtureOwns))
	if got[0] != `TCP 10.96.0.10:80 owner=kube-ipvs drift="scheduler wlc, want rr"` {
		t.Errorf("scheduler drift: got %q", got[0])
	}
	if !slices.Contains(got, `TCP 192.168.1.2:30080 owner=kube-ipvs drift="missing"`) {
		t.Errorf("missing virtual server not marked: %q", got)
	}
}

func TestMergeWithoutDocumentMarksNothing(t *testing.T) {
	got := marks(Merge(fixtureKernel(), nil, nil))
	for _, l := range got {
		if !bytes.Contains([]byte(l), []byte(`drift=""`)) || bytes.Contains([]byte(l), []byte("owner=kube-ipvs")) {
			t.Errorf("without a document nothing is marked or owned: %q", l)
		}
	}
	if len(got) != 10-1 { // the 9 kernel lines, and not the wanted-only real server
		t.Errorf("want the kernel's 4 virtual servers and 5 real servers, got %q", got)
	}
}

func TestFilter(t *testing.T) {
	doc := fixtureDoc(t)
	rows := Merge(fixtureKernel(), &doc, fixtureOwns)
	count := func(f Filter) int {
		n := 0
		for i := range rows {
			if f.Keep(&rows[i]) {
				n++
			}
		}
		return n
	}
	cases := []struct {
		f    Filter
		want int
	}{
		{Filter{}, 4},
		{Filter{Namespace: "demo"}, 2},
		{Filter{Namespace: "other"}, 0},
		{Filter{Service: "web"}, 2},
		{Filter{Service: "demo/web"}, 2},
		{Filter{Service: "x/web"}, 0},
		{Filter{VIP: netip.MustParseAddr("172.16.0.1")}, 1},
		{Filter{VIP: netip.MustParseAddr("10.96.0.10"), Service: "web"}, 1},
	}
	for _, tc := range cases {
		if got := count(tc.f); got != tc.want {
			t.Errorf("%+v: %d rows, want %d", tc.f, got, tc.want)
		}
	}
}

func TestListText(t *testing.T) {
	doc := fixtureDoc(t)
	rows := Merge(fixtureKernel(), &doc, fixtureOwns)
	for _, tc := range []struct {
		name string
		o    TextOptions
	}{{"list.txt", TextOptions{}}, {"list-stats.txt", TextOptions{Stats: true}}, {"list-rate.txt", TextOptions{Rate: true}}, {"list-wide.txt", TextOptions{Wide: true}}} {
		var b bytes.Buffer
		if err := WriteText(&b, rows, tc.o); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, tc.name, b.String())
	}
	var b bytes.Buffer
	if err := WriteText(&b, Merge(fixtureKernel(), nil, nil), TextOptions{}); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "list-nostate.txt", b.String())
}

func TestListJSON(t *testing.T) {
	doc := fixtureDoc(t)
	l := ToListing(Merge(fixtureKernel(), &doc, fixtureOwns), &doc, nil)
	out, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "list.json", string(out)+"\n")
	if l.VirtualServers[0].Service != "web" || l.VirtualServers[0].Reals[1].Pod != "web-1" || !l.VirtualServers[0].Reals[0].Draining {
		t.Errorf("names lost: %+v", l.VirtualServers[0])
	}
	noState := ToListing(Merge(fixtureKernel(), nil, nil), nil, errors.New("state socket gone"))
	if noState.StateError != "state socket gone" || len(noState.VirtualServers) != 4 || noState.VirtualServers[0].Owner != OwnerUnknown {
		t.Errorf("without a document: %+v", noState)
	}
}
