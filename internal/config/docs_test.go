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

// Every secret key (one that may be given by reference) is listed where docs/configuration.md
// names the secret keys, and the README names its KEY_file form.
func TestDocsNameEverySecretKey(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(doc), "Secret keys:")
	if !ok {
		t.Fatal(`docs/configuration.md has no "Secret keys:" paragraph`)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	for _, f := range fields {
		if f.secret == "" {
			continue
		}
		if !strings.Contains(list, "`"+f.key+"`") {
			t.Errorf("docs/configuration.md's secret keys do not name %s", f.key)
		}
		if !strings.Contains(string(readme), "`"+f.key+"_file`") {
			t.Errorf("README.md does not name %s_file", f.key)
		}
	}
}
