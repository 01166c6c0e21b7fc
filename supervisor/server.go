package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// The control API, JSON over HTTP on the unix socket:
//
//	GET  /v1/status                          -> [Status...]
//	POST /v1/start   {"names": [...]}        -> {"results": [Result...]}
//	POST /v1/stop    {"names": [...]}        -> {"results": [Result...]}
//	POST /v1/restart {"names": [...]}        -> {"results": [Result...]}
//	GET  /v1/logs?name=N&stream=stdout|stderr&n=LINES&follow=1 -> text
//	POST /v1/shutdown                        -> {} once every program is stopped
//	POST /v1/wait    {"names": [...]}        -> [Status...] once all are RUNNING;
//	     409 "fatal" when one is FATAL (Supervisor.WaitRunning)
//	POST /v1/hold    {"names": [...]}        -> {"results": [...]} then the
//	     response stays open; the hold ends when the connection closes.
//
// Errors are {"error": "text", "code": "unknown_program" | "bad_request" |
// "internal"} with status 404, 400 or 500; a start or restart whose every
// program a Check refused (nothing stopped or started) is 409 "refused",
// with "class" the code of the refusal's ErrorClass (Options.ErrorClasses)
// when it has one. A program refused among others is a Result with
// "refused" and "class". A call the supervisor refuses because it is
// shutting down, or did not start and is exiting (a hold, a wait, any
// call that waited for the install on start), is 503 "shutting_down"
// (ErrShuttingDown); the client turns each code back into its sentinel
// (Client.responseError).

// namesRequest is the body of start, stop, restart and hold.
type namesRequest struct {
	Names []string `json:"names"`
}

// resultsResponse answers start, stop, restart and hold.
type resultsResponse struct {
	Results []Result `json:"results"`
}

// apiError is the body of an error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Class is the ErrorClass code of a refusal's cause; "" none.
	Class string `json:"class,omitempty"`
}

const (
	codeUnknownProgram = "unknown_program"
	codeBadRequest     = "bad_request"
	codeInternal       = "internal"
	codeFatal          = "fatal"
	codeRefused        = "refused"
	codeShuttingDown   = "shutting_down"
)

func (s *Supervisor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Status())
	})
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Info())
	})
	for path, fn := range map[string]func(*Supervisor, *http.Request, []string) ([]Result, error){
		"POST /v1/start": func(s *Supervisor, r *http.Request, n []string) ([]Result, error) { return s.Start(r.Context(), n...) },
		"POST /v1/stop":  func(s *Supervisor, r *http.Request, n []string) ([]Result, error) { return s.Stop(r.Context(), n...) },
		"POST /v1/restart": func(s *Supervisor, r *http.Request, n []string) ([]Result, error) {
			return s.Restart(r.Context(), n...)
		},
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			req, ok := readNames(w, r)
			if !ok {
				return
			}
			res, err := fn(s, r, req.Names)
			if err != nil {
				s.writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, resultsResponse{res})
		})
	}
	mux.HandleFunc("POST /v1/hold", s.serveHold)
	mux.HandleFunc("POST /v1/shutdown", func(w http.ResponseWriter, r *http.Request) {
		s.Shutdown()
		select {
		case <-s.stopped:
			writeJSON(w, http.StatusOK, struct{}{})
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /v1/wait", func(w http.ResponseWriter, r *http.Request) {
		req, ok := readNames(w, r)
		if !ok {
			return
		}
		sts, err := s.WaitRunning(r.Context(), req.Names...)
		if err != nil {
			s.writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sts)
	})
	mux.HandleFunc("GET /v1/logs", s.serveLogs)
	return mux
}

// serveHold stops the programs, answers, then holds them until the client
// goes away or the supervisor shuts down.
func (s *Supervisor) serveHold(w http.ResponseWriter, r *http.Request) {
	req, ok := readNames(w, r)
	if !ok {
		return
	}
	res, release, err := s.Hold(r.Context(), req.Names...)
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer release()
	writeJSON(w, http.StatusOK, resultsResponse{res})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	select {
	case <-r.Context().Done(): // the holder closed the connection or died
	case <-s.shutdownReq:
	}
}

// serveLogs writes the last n lines of a program's log and, with follow,
// what is appended after them until the client goes away.
func (s *Supervisor) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("name")
	if err := s.checkNames([]string{name}); err != nil || name == "all" {
		s.writeError(w, fmt.Errorf("%w: %q", ErrUnknownProgram, name))
		return
	}
	p := s.procs[name]
	lf := p.spec.Stdout
	switch q.Get("stream") {
	case "", "stdout":
	case "stderr":
		lf = p.spec.Stderr
	case "file":
		if err := checkOwnLog(p.spec); err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error(), Code: codeBadRequest})
			return
		}
		lf = LogFile{Path: p.spec.OwnLog}
	default:
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("stream %q: want stdout, stderr or file", q.Get("stream")), Code: codeBadRequest})
		return
	}
	n := 10
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("n %q: want a line count", v), Code: codeBadRequest})
			return
		}
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	var stop <-chan struct{}
	if follow {
		stop = r.Context().Done()
	}
	if err := tailFile(lf.Path, n, stop, 200*time.Millisecond, w, flush); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("serve logs", "program", name, "err", err)
	}
}

// readNames decodes a namesRequest, answering 400 itself when it cannot.
// It reads the body to its end, so the server notices when the client
// closes the connection (the hold depends on that).
func readNames(w http.ResponseWriter, r *http.Request) (namesRequest, bool) {
	var req namesRequest
	err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
	_, _ = io.Copy(io.Discard, r.Body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "decode request: " + err.Error(), Code: codeBadRequest})
		return req, false
	}
	return req, true
}

// writeError answers err with its status and code; a refusal carries
// the class of its cause.
func (s *Supervisor) writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrUnknownProgram):
		writeJSON(w, http.StatusNotFound, apiError{Error: err.Error(), Code: codeUnknownProgram})
	case errors.Is(err, ErrFatal):
		writeJSON(w, http.StatusConflict, apiError{Error: err.Error(), Code: codeFatal})
	case errors.Is(err, ErrRefused):
		writeJSON(w, http.StatusConflict, apiError{Error: err.Error(), Code: codeRefused, Class: classOf(s.opts.ErrorClasses, err)})
	case errors.Is(err, ErrShuttingDown):
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: err.Error(), Code: codeShuttingDown})
	default:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: err.Error(), Code: codeInternal})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
