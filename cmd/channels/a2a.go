package main

import (
	"fmt"
	"log/slog"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// a2aHandler builds the handler mounted at "/": both A2A bindings (HTTP+JSON at the root,
// JSON-RPC at /jsonrpc) and the agent card, over the plane. creds are the loaded credentials file
// (buildServeParts; nil without one). The handler also implements CloseStreams, which the
// shutdown calls to end open streams and blocking waits. opts adjust the server's configuration
// last (withPush).
func a2aHandler(plane *taskplane.Plane, disp *taskplane.Dispatcher, exec taskplane.Executor, cfg config.Config, creds []a2ahttp.Credential, log *slog.Logger, opts ...func(*a2ahttp.Config)) (*a2ahttp.Server, error) {
	acfg := a2ahttp.Config{
		Name:              cfg.AgentName,
		Description:       cfg.AgentDescription,
		Version:           currentBuild().Version,
		PublicURL:         cfg.EffectivePublicURL(),
		Credentials:       creds,
		AllowAnonymous:    cfg.AllowAnonymous,
		FreshSends:        !cfg.DedupesMessageIDs(),
		Loopback:          cfg.ListensOnLoopback(),
		BlockingTimeout:   cfg.BlockingTimeout,
		KeepAlive:         cfg.KeepAlive,
		DefaultInputModes: cfg.InputModeList(),
		Limits: a2awire.Limits{
			MaxBodyBytes:     int64(cfg.MaxBodyBytes),
			MaxParts:         cfg.MaxParts,
			MaxTextBytes:     cfg.MaxTextBytes,
			MaxRawBytes:      cfg.MaxRawBytes,
			MaxDataBytes:     cfg.MaxDataBytes,
			MaxDataDepth:     cfg.MaxDataDepth,
			MaxMetadataBytes: cfg.MaxMetadataBytes,
			MaxHistoryLength: cfg.MaxHistoryLength,
			MaxPageBytes:     cfg.MaxPageBytes,

			MaxStreams:             cfg.MaxStreams,
			MaxStreamsPerPrincipal: cfg.MaxStreamsPerPrincipal,

			MaxBlockingSends:             cfg.MaxBlockingSends,
			MaxBlockingSendsPerPrincipal: cfg.MaxBlockingSendsPerPrincipal,
		},
		Logger: log,
	}
	for _, o := range opts {
		o(&acfg)
	}
	srv, err := a2ahttp.NewServer(plane, disp, exec, acfg)
	if err != nil {
		return nil, fmt.Errorf("a2a server: %w", err)
	}
	return srv, nil
}
