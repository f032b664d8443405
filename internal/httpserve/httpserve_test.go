package httpserve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestServeAnswersUntilContextEndsThenReturnsNil(t *testing.T) {
	addrs := make(chan string, 1)
	listen := func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, "127.0.0.1:0")
		if err == nil {
			addrs <- ln.Addr().String()
		}
		return ln, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "up")
	})}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, listen, "ignored", srv) }()
	resp, err := http.Get("http://" + <-addrs + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "up" {
		t.Fatalf("body = %q, want up", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(ShutdownGrace + time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestServeReturnsListenError(t *testing.T) {
	want := errors.New("address in use")
	listen := func(string, string) (net.Listener, error) { return nil, want }
	if err := Serve(context.Background(), listen, ":1", &http.Server{}); !errors.Is(err, want) {
		t.Fatalf("Serve = %v, want %v", err, want)
	}
}

func TestSettersKeepDefaultsOnNil(t *testing.T) {
	h := DefaultHooks()
	h.SetNow(nil)
	h.SetListen(nil)
	if h.Now == nil || h.Listen == nil {
		t.Fatal("nil replaced a default")
	}
	fixed := time.Unix(42, 0)
	h.SetNow(func() time.Time { return fixed })
	if !h.Now().Equal(fixed) {
		t.Fatalf("Now = %v, want %v", h.Now(), fixed)
	}
}
