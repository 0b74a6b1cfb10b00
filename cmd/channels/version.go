package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

// buildInfo describes this binary.
type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
		if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
	}
	return b
}

func (a *app) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "version",
		Short:       "Print the version of this build",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{noConfig: "true"},
		RunE: func(*cobra.Command, []string) error {
			b := currentBuild()
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(b)
			}
			s := "channels " + b.Version
			if b.Commit != "" {
				s += " (" + b.Commit
				if b.Modified {
					s += ", modified"
				}
				s += ")"
			}
			_, err := fmt.Fprintln(a.stdout, s+" "+b.Go)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
