package main

import (
	"log/slog"
	"net/http"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/taskplane"
)

// a2aHandler builds the handler mounted at "/": the A2A bindings over the plane. This build
// carries no A2A binding yet, so every A2A route answers 404 with a JSON body that says so; the
// health endpoints and the executor run regardless.
func a2aHandler(_ *taskplane.Plane, _ *taskplane.Dispatcher, _ taskplane.Executor, _ config.Config, _ *slog.Logger) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found: this build has no A2A binding"})
	}), nil
}
