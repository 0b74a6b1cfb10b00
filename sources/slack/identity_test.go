package slack

import (
	"testing"

	"github.com/slack-go/slack"
)

// In an Enterprise Grid organisation, an event is ours when it was delivered for the bot's
// installation (its authorizations): the workspace's, or an organisation-wide one. Another
// workspace-level installation in the same organisation is not ours, and neither is an event
// delivered for another installation whatever workspace (team_id) created its channel. Only an
// event without authorizations is decided by its team_id.
func TestAnEventIsOursWhenItWasDeliveredForOurInstallation(t *testing.T) {
	grid := &botIdentity{Team: "T1", Enterprise: "E1"}
	for _, tc := range []struct {
		name  string
		team  string
		auths []slack.EventAuthorization
		want  bool
	}{
		{"the bot's workspace, no authorizations", "T1", nil, true},
		{"another workspace, no authorizations", "T2", nil, false},
		{"the bot's workspace, delivered for our installation", "T1", []slack.EventAuthorization{{TeamID: "T1", EnterpriseID: "E1"}}, true},
		{"a shared channel our workspace created, delivered for another installation", "T1", []slack.EventAuthorization{{TeamID: "T2", EnterpriseID: "E1"}}, false},
		{"a shared channel our workspace created, delivered for another organisation's installation", "T1", []slack.EventAuthorization{{TeamID: "T3", EnterpriseID: "E9", IsEnterpriseInstall: true}}, false},
		{"a shared channel, delivered for our installation", "T2", []slack.EventAuthorization{{TeamID: "T1", EnterpriseID: "E1"}}, true},
		{"an organisation-wide installation of our organisation", "T2", []slack.EventAuthorization{{EnterpriseID: "E1", IsEnterpriseInstall: true}}, true},
		{"another workspace-level installation in our organisation", "T2", []slack.EventAuthorization{{TeamID: "T2", EnterpriseID: "E1"}}, false},
		{"another organisation", "T3", []slack.EventAuthorization{{TeamID: "T3", EnterpriseID: "E9", IsEnterpriseInstall: true}}, false},
	} {
		if got := grid.ours(tc.team, tc.auths); got != tc.want {
			t.Errorf("%s: ours = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !(&botIdentity{}).ours("T3", nil) {
		t.Error("before auth.test names the workspace, an event was refused")
	}
}

// An interaction is ours when it acts on a message (or dialog) this bot posted: each installation
// has its own bot user.
func TestAnInteractionIsOursWhenItActsOnOurMessage(t *testing.T) {
	b := &botIdentity{Team: "T1", UserID: "U0BOT", BotID: "B0BOT"}
	for _, tc := range []struct {
		botID, user string
		want        bool
	}{
		{"B0BOT", "U0BOT", true},
		{"B0BOT", "", true},
		{"", "U0BOT", true},
		{"", "", true}, // the payload does not name a bot: its team (T1) decides
		{"B0OTHER", "U0OTHER", false},
	} {
		if got := b.postedByUs(tc.botID, tc.user, "T1", "", false); got != tc.want {
			t.Errorf("postedByUs(%q, %q) = %v, want %v", tc.botID, tc.user, got, tc.want)
		}
	}
	if b.postedByUs("", "", "T2", "", false) {
		t.Error("a payload of another workspace that names no bot was ours")
	}
	if !(&botIdentity{}).postedByUs("B0OTHER", "U0OTHER", "T2", "", false) {
		t.Error("before auth.test names the bot, an interaction was refused")
	}
}
