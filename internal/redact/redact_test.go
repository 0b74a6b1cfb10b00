package redact_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/channels-dev/channels/internal/redact"
)

func TestURLErrorKeepsNoPathQueryOrUserButKeepsTheCause(t *testing.T) {
	// A real failed request: nothing listens on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	raw := "http://user:pw@" + addr + "/hooks/s3cr3t-path?token=s3cr3t-query"
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, raw, nil)
	_, err = http.DefaultClient.Do(req)
	if err == nil {
		t.Fatal("request to a closed port succeeded")
	}
	got := redact.URLError(err)
	for _, secret := range []string{"s3cr3t", "user", "pw"} {
		if strings.Contains(got.Error(), secret) {
			t.Errorf("redacted error %q still holds %q", got, secret)
		}
	}
	if !strings.Contains(got.Error(), "http://"+addr) {
		t.Errorf("redacted error %q lost the origin", got)
	}
	var opErr *net.OpError
	if !errors.As(got, &opErr) {
		t.Errorf("redacted error %q lost its cause", got)
	}
	var ue *url.Error
	if !errors.As(got, &ue) || ue.Op != "Post" {
		t.Errorf("redacted error %q is not a *url.Error of the same operation", got)
	}
	if plain := errors.New("x"); redact.URLError(plain) != plain {
		t.Error("an error that is not a *url.Error changed")
	}
}

func TestOrigin(t *testing.T) {
	for raw, want := range map[string]string{
		"https://example.com:8443/a/b?c=d": "https://example.com:8443",
		"https://u:p@example.com/x":        "https://example.com",
		"not a url":                        "(url)",
		"/relative":                        "(url)",
	} {
		if got := redact.Origin(raw); got != want {
			t.Errorf("Origin(%q) = %q, want %q", raw, got, want)
		}
	}
}
