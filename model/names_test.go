package model

import "testing"

func TestEnumNames(t *testing.T) {
	for _, tc := range []struct {
		got  string
		want string
	}{
		{TCP.String(), "TCP"}, {UDP.String(), "UDP"}, {SCTP.String(), "SCTP"}, {Protocol(99).String(), "proto-99"},
		{KindClusterIP.String(), "ClusterIP"}, {KindExternalIP.String(), "ExternalIP"},
		{KindLoadBalancer.String(), "LoadBalancer"}, {KindNodePort.String(), "NodePort"}, {VSKind(77).String(), "kind-77"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
