// Command a2afloor is the cheapest server that answers `channels bench a2a` (REST binding,
// blocking mode): it decodes each SendMessage request and answers a COMPLETED task whose
// history holds the message and an agent reply repeating it. Nothing is stored, nothing waits.
// Loaded by the same load generator, it shows what HTTP and JSON cost on a machine, beside what
// a real server costs (README.md).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

type part struct {
	Text string `json:"text,omitempty"`
}

type message struct {
	MessageID string `json:"messageId"`
	Role      string `json:"role"`
	Parts     []part `json:"parts"`
	ContextID string `json:"contextId,omitempty"`
	TaskID    string `json:"taskId,omitempty"`
}

type status struct {
	State     string    `json:"state"`
	Timestamp time.Time `json:"timestamp"`
}

type task struct {
	ID        string    `json:"id"`
	ContextID string    `json:"contextId"`
	Status    status    `json:"status"`
	History   []message `json:"history"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/message:send" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Message message `json:"message"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := fmt.Sprintf("00000000-0000-7000-8000-%012d", n.Add(1))
		m := req.Message
		m.TaskID, m.ContextID = id, id
		reply := message{MessageID: id + "-reply", Role: "ROLE_AGENT", Parts: m.Parts, TaskID: id, ContextID: id}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Task task `json:"task"`
		}{task{ID: id, ContextID: id, Status: status{State: "TASK_STATE_COMPLETED", Timestamp: time.Now().UTC()},
			History: []message{m, reply}}})
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
