package redact_test

import (
	"context"
	"errors"
	"fmt"
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

func TestTextKeepsOnlyTheOriginOfEveryURLInIt(t *testing.T) {
	in := `resolve the agent card of https://agent.example:8443/a/s3cr3t-path?api_key=s3cr3t-key: ` +
		`Get "https://u:s3cr3t-pw@agent.example:8443/a/.well-known/agent-card.json?api_key=s3cr3t-key": EOF`
	got := redact.Text(in)
	if strings.Contains(got, "s3cr3t") {
		t.Errorf("Text(%q) = %q, still holds a secret", in, got)
	}
	want := `resolve the agent card of https://agent.example:8443: Get "https://agent.example:8443": EOF`
	if got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	if plain := "no URL here: just words"; redact.Text(plain) != plain {
		t.Errorf("Text changed text without a URL: %q", redact.Text(plain))
	}
}

func TestErrorRedactsTheMessageAndKeepsTheChain(t *testing.T) {
	cause := context.DeadlineExceeded
	err := fmt.Errorf("call http://127.0.0.1:9/x?token=s3cr3t: %w", cause)
	got := redact.Error(err)
	if strings.Contains(got.Error(), "s3cr3t") || !strings.Contains(got.Error(), "http://127.0.0.1:9") {
		t.Errorf("Error(...) = %q", got)
	}
	if !errors.Is(got, cause) {
		t.Errorf("redacted error %q lost its cause", got)
	}
	if redact.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	if plain := errors.New("x"); redact.Error(plain) != plain {
		t.Error("an error without a URL changed")
	}
}
