package introspect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/golden"
)

func TestExplain(t *testing.T) {
	doc := fixtureDoc(t)
	svc := doc.FindService("demo", "web")
	if svc == nil {
		t.Fatal("demo/web not in the document")
	}
	if doc.FindService("demo", "nope") != nil {
		t.Error("found a Service that does not exist")
	}
	var b bytes.Buffer
	if err := WriteExplain(&b, svc); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	golden.Check(t, "explain.txt", out)
	for _, want := range []string{
		"10.244.0.12:8080", "web-2 on node-a", "not chosen: " + model.WhyNotReady, // the excluded endpoint, its pod and why
		"InvalidScheduler", // the rejected annotation
		"10.96.0.10", "bound to kube-ipvs0", "node IP (NodePort)",
		"-> 10.244.0.9:8080 weight 0  (draining, 25s left)",
		"KIPVS-CLUSTER-IP 10.96.0.10,tcp:80", "--match-set KIPVS-CLUSTER-IP",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
}
