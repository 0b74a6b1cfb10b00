package push_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/channels-dev/channels/push"
)

// A webhook receiver: verify the signature with the token you registered, act on each
// notification id once, answer 2xx. This is the receiver of docs/push.md.
func Example_receiver() {
	const token = "the token you registered with the config"
	var seen push.SeenIDs

	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		n, err := push.Verify(r.Header, body, token, time.Now(), push.DefaultTolerance)
		if err != nil {
			http.Error(w, "not a genuine notification", http.StatusUnauthorized) // forgery or stale replay
			return
		}
		if seen.Mark(n.ID, time.Now()) {
			w.WriteHeader(http.StatusNoContent) // a retry of a notification already handled
			return
		}
		var ev struct {
			Task           *struct{ ID string }                     `json:"task"`
			StatusUpdate   *struct{ Status struct{ State string } } `json:"statusUpdate"`
			ArtifactUpdate *struct {
				Artifact struct {
					ArtifactID string `json:"artifactId"`
				}
			} `json:"artifactUpdate"`
		}
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "not a StreamResponse", http.StatusBadRequest)
			return
		}
		switch {
		case ev.Task != nil:
			fmt.Println(n.ID, "task")
		case ev.StatusUpdate != nil:
			fmt.Println(n.ID, ev.StatusUpdate.Status.State)
		case ev.ArtifactUpdate != nil:
			fmt.Println(n.ID, "artifact", ev.ArtifactUpdate.Artifact.ArtifactID)
		}
		w.WriteHeader(http.StatusNoContent)
	})

	// What Channels sends, simulated: the same notification twice (a retry), then a forgery.
	deliver := func(id, body, key string) int {
		r := httptest.NewRequest(http.MethodPost, "/a2a/notify", bytes.NewReader([]byte(body)))
		r.Header.Set("Content-Type", push.ContentType)
		r.Header.Set(push.HeaderID, id)
		r.Header.Set(push.HeaderSignature, push.Sign(key, time.Now(), id, []byte(body)))
		w := httptest.NewRecorder()
		receiver.ServeHTTP(w, r)
		return w.Code
	}
	working := `{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`
	fmt.Println(deliver("t1:2", working, token))
	fmt.Println(deliver("t1:2", working, token))
	fmt.Println(deliver("t1:3", working, "a guess"))
	// Output:
	// t1:2 TASK_STATE_WORKING
	// 204
	// 204
	// 401
}
