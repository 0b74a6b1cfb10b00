package main

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// a2aHandler builds the handler mounted at "/": both A2A bindings (HTTP+JSON at the root,
// JSON-RPC at /jsonrpc) and the agent card, over the plane. The handler also implements
// CloseStreams, which the shutdown calls to end open streams and blocking waits.
func a2aHandler(plane *taskplane.Plane, disp *taskplane.Dispatcher, exec taskplane.Executor, cfg config.Config, log *slog.Logger) (http.Handler, error) {
	var creds []a2ahttp.Credential
	if cfg.Credentials != "" {
		var err error
		if creds, err = a2ahttp.LoadCredentials(cfg.Credentials); err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
	}
	srv, err := a2ahttp.NewServer(plane, disp, exec, a2ahttp.Config{
		Name:            cfg.AgentName,
		Description:     cfg.AgentDescription,
		Version:         currentBuild().Version,
		PublicURL:       cfg.EffectivePublicURL(),
		Credentials:     creds,
		AllowAnonymous:  cfg.AllowAnonymous,
		Loopback:        cfg.ListensOnLoopback(),
		BlockingTimeout: cfg.BlockingTimeout,
		KeepAlive:       cfg.KeepAlive,
		Limits: a2awire.Limits{
			MaxBodyBytes:     int64(cfg.MaxBodyBytes),
			MaxParts:         cfg.MaxParts,
			MaxTextBytes:     cfg.MaxTextBytes,
			MaxRawBytes:      cfg.MaxRawBytes,
			MaxDataBytes:     cfg.MaxDataBytes,
			MaxDataDepth:     cfg.MaxDataDepth,
			MaxMetadataBytes: cfg.MaxMetadataBytes,
			MaxHistoryLength: cfg.MaxHistoryLength,
		},
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("a2a server: %w", err)
	}
	return srv, nil
}
