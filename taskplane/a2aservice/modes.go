package a2aservice

import (
	"slices"
	"strings"

	"github.com/channels-dev/channels/internal/mediarange"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// DefaultInputModes are the media types a message's parts may have unless configured otherwise:
// text, and data parts (JSON).
var DefaultInputModes = []string{"text/plain", "application/json"}

// inputModesOf is what a card of cfg offers: its default input modes and every skill's.
func inputModesOf(cfg Config) []string {
	modes := slices.Clone(cfg.DefaultInputModes)
	for _, sk := range cfg.Skills {
		modes = append(modes, sk.InputModes...)
	}
	return modes
}

// checkMediaTypes refuses a message with a part whose media type the card does not offer
// (ContentTypeNotSupported): a part's own mediaType, else text/plain for text and
// application/json for data. A file part (raw or url) without one is left to the executor.
func (s *Service) checkMediaTypes(parts []taskplane.Part) error {
	modes := s.inputModes
	for i, p := range parts {
		mt := p.MediaType
		switch {
		case mt != "":
		case p.Text != "":
			mt = "text/plain"
		case p.Data != nil:
			mt = "application/json"
		default:
			continue
		}
		if !mediarange.Covers(modes, mt) {
			return a2awire.Errorf(a2awire.ErrContentTypeNotSupported,
				"message.parts[%d]: media type %q is not one this agent accepts (%s)", i, mt, strings.Join(modes, ", "))
		}
	}
	return nil
}
