package a2aservice

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Last-Event-ID names an event id this server sent, and it sends plain decimal numbers: another
// spelling of one ("+3", "003", " 3.0") is refused as any other value that is not one.
func TestLastEventIDIsOnlyAnIDThisServerSends(t *testing.T) {
	for v, want := range map[string]int64{"0": 0, "3": 3, " 17 ": 17, "+3": -2, "003": -2, "00": -2, "3.0": -2, "-1": -2, "0x3": -2} {
		r := httptest.NewRequest(http.MethodGet, "/tasks/t:subscribe", nil)
		r.Header.Set(HeaderLastEventID, v)
		n, err := LastEventID("SubscribeToTask", r)
		switch {
		case want == -2 && err == nil:
			t.Errorf("Last-Event-ID %q read as %d, want it refused", v, n)
		case want >= 0 && (err != nil || n != want):
			t.Errorf("Last-Event-ID %q: %d, %v; want %d", v, n, err, want)
		}
	}
}

// An error message repeats at most an excerpt of a value the client sent: a long A2A-Version or
// Content-Type does not come back whole.
func TestRefusalsRepeatAtMostAnExcerptOfTheClientsValue(t *testing.T) {
	s, err := New(taskplane.New(storetest.OpenSQLite(t)), nil, nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 100_000)
	r := httptest.NewRequest(http.MethodPost, "/message:send", nil)
	r.Header.Set(HeaderVersion, "9."+long)
	_, verr := s.Negotiate(r)
	r.Header.Set("Content-Type", "text/"+long)
	cerr := CheckContentType(r)
	for name, e := range map[string]*a2awire.Error{"A2A-Version": verr, "Content-Type": cerr} {
		if e == nil {
			t.Fatalf("%s: accepted", name)
		}
		if len(e.Message) > a2awire.ExcerptBytes+200 || !strings.Contains(e.Message, "xxx…") {
			t.Errorf("%s: a message of %d bytes: %.300s", name, len(e.Message), e.Message)
		}
	}
}
