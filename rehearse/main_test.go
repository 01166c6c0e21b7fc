package rehearse

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"
)

// The test binary is also the rehearsed payload and its escaping
// grandchild, chosen by the environment the image config sets.
const (
	// payloadEnv makes the binary a payload: it starts an escapee, then
	// serves /api/health on EXECUTOR_HOST:PORT, or exits 1 once the
	// escapee is up when exitEnv is "1".
	payloadEnv = "HBXTEST_REHEARSE_PAYLOAD"
	exitEnv    = "HBXTEST_REHEARSE_EXIT"
	// escapeeEnv makes it the escapee: a new session, none of the
	// payload's descriptors (launch's marker, the held file), SIGTERM
	// ignored; it writes its pid to the file escapeeEnv names and sleeps.
	escapeeEnv = "HBXTEST_REHEARSE_ESCAPEE"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(escapeeEnv) != "" && os.Getenv(payloadEnv) == "":
		escapee(os.Getenv(escapeeEnv))
	case os.Getenv(payloadEnv) != "":
		payload()
	}
	os.Exit(testcgroup.RunInCgroup(m, true))
}

// payload is the rehearsed release: see payloadEnv.
func payload() {
	// What the payload inherited (fd 3 on) is not passed on.
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	pidFile := os.Getenv(escapeeEnv)
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{escapeeEnv + "=" + pidFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "payload: start the escapee:", err)
		os.Exit(2)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "payload: the escapee wrote no pid")
			os.Exit(2)
		}
	}
	if os.Getenv(exitEnv) == "1" {
		fmt.Println("payload: exiting with status 1 as asked")
		os.Exit(1)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("EXECUTOR_HOST"), os.Getenv("PORT")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "payload:", err)
		os.Exit(2)
	}
	fmt.Println("payload: listening")
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
	}))
	os.Exit(2)
}

// escapee is the payload's grandchild that leaves everything: see
// escapeeEnv.
func escapee(pidFile string) {
	signal.Ignore(syscall.SIGTERM)
	tmp := pidFile + ".tmp"
	if os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600) != nil || os.Rename(tmp, filepath.Clean(pidFile)) != nil {
		os.Exit(2)
	}
	for {
		time.Sleep(time.Hour)
	}
}
