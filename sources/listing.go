package sources

import (
	"sort"

	matrix "github.com/channels-dev/channels/conformance-matrix"
)

// Info describes one source for `channels sources`: whether it is registered in this binary,
// whether the configuration runs instances of it, and its matrix row.
type Info struct {
	Name       string      `json:"name"`
	Registered bool        `json:"registered"`
	Configured bool        `json:"configured"`
	Instances  []string    `json:"instances,omitempty"`
	Row        *matrix.Row `json:"row,omitempty"`
}

// List describes every source that is registered or has a matrix row, sorted by name.
// configured maps a source name to the names of its configured instances.
func List(m *matrix.Matrix, configured map[string][]string) []Info {
	byName := map[string]*Info{}
	info := func(name string) *Info {
		if byName[name] == nil {
			byName[name] = &Info{Name: name}
		}
		return byName[name]
	}
	for _, name := range Names() {
		info(name).Registered = true
	}
	for i := range m.Sources {
		info(m.Sources[i].Source).Row = &m.Sources[i]
	}
	for _, r := range matrix.Declared() {
		info(r.Source).Row = &r
	}
	for name, inst := range configured {
		in := info(name)
		in.Instances = append([]string(nil), inst...)
		sort.Strings(in.Instances)
		in.Configured = len(inst) > 0
	}
	out := make([]Info, 0, len(byName))
	for _, in := range byName {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
