package slack

import (
	"testing"

	"github.com/slack-go/slack"
)

func TestAnEnterpriseInstallationOwnsItsWorkspacesEvents(t *testing.T) {
	grid := &botIdentity{Team: "T1", Enterprise: "E1"}
	for _, tc := range []struct {
		name             string
		team, enterprise string
		auths            []slack.EventAuthorization
		want             bool
	}{
		{"the bot's workspace", "T1", "", nil, true},
		{"another workspace of the organisation", "T2", "E1", nil, true},
		{"an organisation-wide installation named in authorizations", "T2", "", []slack.EventAuthorization{{EnterpriseID: "E1", IsEnterpriseInstall: true}}, true},
		{"another organisation", "T3", "E9", []slack.EventAuthorization{{TeamID: "T3", EnterpriseID: "E9"}}, false},
	} {
		if got := grid.ours(tc.team, tc.enterprise, tc.auths); got != tc.want {
			t.Errorf("%s: ours = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !(&botIdentity{}).ours("T3", "", nil) {
		t.Error("before auth.test names the workspace, an event was refused")
	}
	if (&botIdentity{Team: "T1"}).ours("T3", "", nil) {
		t.Error("a bot outside any organisation took an event of another workspace")
	}
}
