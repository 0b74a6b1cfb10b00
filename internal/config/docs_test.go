package config

import (
	"os"
	"strings"
	"testing"
)

// docs/configuration.md is the reference of every key: it must name each one.
func TestConfigurationDocNamesEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(Keys(), SourcesKey) {
		if !strings.Contains(string(b), "`"+k+"`") {
			t.Errorf("docs/configuration.md does not name config key %s", k)
		}
	}
}
