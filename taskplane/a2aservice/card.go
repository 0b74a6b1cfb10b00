package a2aservice

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// BearerScheme is the card's name of the bearer-token security scheme.
const BearerScheme = "bearer"

// CardDocument is an encoded agent card with its cache validators.
type CardDocument struct {
	Body         []byte
	ETag         string // quoted strong validator: a hash of Body
	LastModified time.Time
	MaxAge       time.Duration
}

type cardCache struct {
	public CardDocument
}

func (s *Service) newCardCache() (*cardCache, error) {
	doc, err := s.document(s.card0(""))
	if err != nil {
		return nil, err
	}
	return &cardCache{public: doc}, nil
}

func (s *Service) document(card *a2awire.AgentCard) (CardDocument, error) {
	b, err := json.Marshal(card)
	if err != nil {
		return CardDocument{}, fmt.Errorf("encode agent card: %w", err)
	}
	sum := sha256.Sum256(b)
	return CardDocument{
		Body:         b,
		ETag:         `"` + hex.EncodeToString(sum[:16]) + `"`,
		LastModified: startTime,
		MaxAge:       s.cfg.CardMaxAge,
	}, nil
}

// startTime is the card's Last-Modified: the card is built from configuration, which changes
// only with a restart.
var startTime = time.Now().UTC().Truncate(time.Second)

// PublicCard returns the public agent card.
func (s *Service) PublicCard() CardDocument { return s.card.public }

// Card returns the public agent card as a value.
func (s *Service) Card() *a2awire.AgentCard { return s.card0("") }

// ExtendedCard returns the extended card of principal: the public card plus the principal's own
// skills. The specification requires an authenticated caller, with a scheme the public card
// declares: a server with credentials declares extendedAgentCard and the bearer scheme, and
// serves the card to callers with a token, never to anonymous ones (401 with the challenge). A
// server without credentials has no way to authenticate anyone, so it declares no extended card
// and the operation is UnsupportedOperation.
func (s *Service) ExtendedCard(principal string) (*a2awire.AgentCard, CardDocument, *a2awire.Error) {
	if !s.hasExtendedCard() {
		return nil, CardDocument{}, a2awire.Errorf(a2awire.ErrUnsupportedOperation,
			"this server declares no extended agent card: it has no credentials to authenticate a caller with")
	}
	if principal == "" || principal == AnonymousPrincipal {
		return nil, CardDocument{}, errCardAuth
	}
	card := s.card0(principal)
	doc, err := s.document(card)
	if err != nil {
		return nil, CardDocument{}, a2awire.Errorf(a2awire.ErrInternal, "internal error")
	}
	return card, doc, nil
}

// hasExtendedCard reports whether the card declares an extended card: only a server that can
// authenticate callers (it has credentials) can serve one.
func (s *Service) hasExtendedCard() bool { return len(s.cfg.Credentials) > 0 }

// card0 builds the card; principal "" is the public card.
func (s *Service) card0(principal string) *a2awire.AgentCard {
	yes, push, ext := true, s.cfg.Push != nil, s.hasExtendedCard()
	card := &a2awire.AgentCard{
		Name:        s.cfg.Name,
		Description: s.cfg.Description,
		Version:     s.cfg.Version,
		SupportedInterfaces: []a2awire.AgentInterface{
			{URL: s.cfg.PublicURL, ProtocolBinding: a2awire.BindingHTTPJSON, ProtocolVersion: a2awire.ProtocolVersion},
			{URL: s.cfg.PublicURL + JSONRPCPath, ProtocolBinding: a2awire.BindingJSONRPC, ProtocolVersion: a2awire.ProtocolVersion},
		},
		Capabilities: a2awire.AgentCapabilities{
			Streaming:         &yes,
			PushNotifications: &push,
			ExtendedAgentCard: &ext,
		},
		DefaultInputModes:  s.cfg.DefaultInputModes,
		DefaultOutputModes: s.cfg.DefaultOutputModes,
		Skills:             slices.Clone(s.cfg.Skills),
	}
	for _, e := range SupportedExtensions {
		e.Required = slices.Contains(s.cfg.RequiredExtensions, e.URI)
		card.Capabilities.Extensions = append(card.Capabilities.Extensions, e)
	}
	if len(card.Skills) == 0 {
		card.Skills = []a2awire.AgentSkill{{ID: "channels", Name: s.cfg.Name, Description: s.cfg.Description, Tags: []string{"channels"}}}
	}
	if principal != "" {
		card.Skills = append(card.Skills, s.cfg.PrincipalSkills[principal]...)
	}
	// The bearer scheme is declared, but no securityRequirements are listed: a2a-go v2.4.0
	// cannot parse the ProtoJSON StringList shape ({"list":[…]}) the spec requires there
	// (a2aproject/a2a-go#430), so a requirement would make the card unreadable to the official Go
	// client. The field is optional; the 401 challenge says the rest.
	if len(s.creds) > 0 {
		card.SecuritySchemes = map[string]a2awire.SecurityScheme{
			BearerScheme: {HTTPAuth: &a2awire.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "A token from the server's credentials file."}},
		}
	}
	return card
}
