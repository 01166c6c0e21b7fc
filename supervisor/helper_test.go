package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"

	"github.com/hermesbox/hbx/internal/testenv"
)

// The test binary doubles as the supervised program: TestMain runs a
// helper instead of the tests when HBXTEST_HELPER names one. Helpers read
// HBXTEST_DIR (a directory for their records) and HBXTEST_ARG.
//
//	sleep         sleep until a signal kills it (SIGTERM by default)
//	exit          exit with status HBXTEST_ARG at once
//	hold          catch the hold's signals, create HBXTEST_DIR/caught, wait
//	              for HBXTEST_DIR/go, then hold on "boom" with the held
//	              file HBXTEST_ARG; exit 7 when the hold returns
//	wait-exit     wait until the test creates DIR/go, then exit with status
//	              HBXTEST_ARG (its RUNNING state lasts until the test ends it)
//	crash-once    the first run lives until the test creates DIR/go and
//	              exits 1, later runs exit 1 at once
//	ignore-term   ignore SIGTERM, start a grandchild that ignores it too,
//	              record both pids in DIR/pids once it does, sleep
//	bun-tree      as Executor since v1.5.30: start a "workerd" grandchild
//	              (ignores SIGTERM), record both pids in DIR/pids once it
//	              ignores it, sleep; on SIGTERM SIGKILL it and exit 0
//	workerd       ignore SIGTERM, create DIR/workerd-<pid>, sleep
//	leave-child   start a grandchild that ignores SIGTERM (pid in DIR/pids
//	              once it does), then exit 1 after 200ms (a crash that leaves a process behind);
//	              later runs record in DIR/check whether the previous
//	              grandchild was still alive when they started
//	double-fork   start a child that starts a grandchild and exits at once;
//	              the orphaned grandchild sleeps; record its pid in DIR/pids
//	write         write HBXTEST_ARG bytes to stdout, then sleep
//	leaf          a grandchild: ignore SIGTERM, then create DIR/leaf-<pid>
//	              (the parents above record a leaf's pid only after that,
//	              so a test that read it knows SIGTERM is ignored), sleep
//	setsid-child  start a "leaf" in a session of its own (setsid), record
//	              "<own pid> <leaf pid>" in DIR/pids once it is ready, sleep
//	leave-setsid  leave-child, with the grandchild in a session of its own
//	setsid-mainexit  start this binary in a session of its own as a
//	              process whose main thread exited (testenv.MainThreadExitsEnv),
//	              record "<own pid> <its pid>" in DIR/pids once it is one, sleep
//	fork-append   start an "append-leaf" (pid in DIR/pids), sleep
//	append-leaf   ignore SIGTERM; append "<pid>" to DIR/appends every 2ms;
//	              with HBXTEST_ARG=close, close the inherited marker first
//	tick          write a line to stdout every 10ms
//	supervise     run a Supervisor in this process (a real supervisor
//	              process for signal and kill -9 tests): state directory
//	              HBXTEST_STATE, one program "prog" running this binary as
//	              helper HBXTEST_PROG with DIR and ARG, stopwaitsecs 300ms,
//	              HandleSignals; log to stderr; exit 0 when Run returns nil
//
// Every run appends "<unix nanos> <pid>" to DIR/starts.
func TestMain(m *testing.M) {
	if h := os.Getenv("HBXTEST_HELPER"); h != "" {
		os.Exit(helper(h))
	}
	os.Exit(testcgroup.RunInCgroup(m, true))
}

func helper(name string) int {
	dir, arg := os.Getenv("HBXTEST_DIR"), os.Getenv("HBXTEST_ARG")
	appendLine := func(file, line string) {
		f, err := os.OpenFile(dir+"/"+file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	if name == "hold" {
		return holdHelper(dir, arg)
	}
	if name != "leaf" && name != "double-fork-mid" && name != "append-leaf" && name != "supervise" && name != "workerd" {
		appendLine("starts", fmt.Sprintf("%d %d", time.Now().UnixNano(), os.Getpid()))
	}
	child := func(helper string) *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "HBXTEST_HELPER="+helper)
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return c
	}
	forever := func() int {
		for {
			time.Sleep(time.Hour)
		}
	}
	switch name {
	case "sleep":
		return forever()
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n
	case "wait-exit":
		waitFile(dir + "/go")
		n, _ := strconv.Atoi(arg)
		return n
	case "crash-once":
		b, _ := os.ReadFile(dir + "/starts")
		if strings.Count(string(b), "\n") == 1 {
			waitFile(dir + "/go")
		}
		return 1
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		c := leafReady(dir, child("leaf"))
		appendLine("pids", fmt.Sprintf("%d %d", os.Getpid(), c.Process.Pid))
		return forever()
	case "bun-tree":
		return bunTree(dir, child, appendLine)
	case "workerd":
		signal.Ignore(syscall.SIGTERM)
		appendLine(fmt.Sprintf("workerd-%d", os.Getpid()), "ready")
		return forever()
	case "leave-child", "leave-setsid":
		if b, err := os.ReadFile(dir + "/pids"); err == nil {
			pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
			appendLine("check", fmt.Sprintf("%d alive=%v", pid, syscall.Kill(pid, 0) == nil && !zombie(pid)))
			return forever()
		}
		var c *exec.Cmd
		if name == "leave-setsid" {
			c = leafReady(dir, setsidChild("leaf"))
		} else {
			c = leafReady(dir, child("leaf"))
		}
		appendLine("pids", strconv.Itoa(c.Process.Pid))
		time.Sleep(200 * time.Millisecond)
		return 1
	case "double-fork":
		c := child("double-fork-mid")
		c.Wait()
		return forever()
	case "double-fork-mid":
		c := leafReady(dir, child("leaf"))
		appendLine("pids", strconv.Itoa(c.Process.Pid))
		return 0
	case "write":
		n, _ := strconv.Atoi(arg)
		line := strings.Repeat("x", 99) + "\n"
		for i := 0; i < n/100; i++ {
			os.Stdout.WriteString(line)
		}
		fmt.Fprintln(os.Stderr, "wrote", n)
		return forever()
	case "leaf":
		signal.Ignore(syscall.SIGTERM)
		appendLine(fmt.Sprintf("leaf-%d", os.Getpid()), "ready")
		return forever()
	case "setsid-child":
		c := leafReady(dir, setsidChild("leaf"))
		appendLine("pids", fmt.Sprintf("%d %d", os.Getpid(), c.Process.Pid))
		return forever()
	case "setsid-mainexit":
		c := exec.Command(os.Args[0])
		// It outlives this program (the stop must end it), not the test
		// (this program's parent: the supervisor runs in it).
		c.Env = append(os.Environ(), testenv.MainThreadExitsWatching(os.Getppid()), "GOMAXPROCS=4")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		_ = testenv.AwaitMainThreadExit(c.Process.Pid) // the test checks what it finds
		appendLine("pids", fmt.Sprintf("%d %d", os.Getpid(), c.Process.Pid))
		return forever()
	case "fork-append":
		c := child("append-leaf")
		appendLine("pids", strconv.Itoa(c.Process.Pid))
		return forever()
	case "append-leaf":
		signal.Ignore(syscall.SIGTERM)
		if arg == "close" {
			for fd := 3; fd < 10; fd++ {
				if l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.HasSuffix(l, ".marker") {
					syscall.Close(fd)
				}
			}
		}
		for {
			appendLine("appends", strconv.Itoa(os.Getpid()))
			time.Sleep(2 * time.Millisecond)
		}
	case "tick":
		for i := 0; ; i++ {
			fmt.Println("tick", i)
			time.Sleep(10 * time.Millisecond)
		}
	case "supervise":
		return superviseHelper()
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}

// bunTree is the "bun-tree" helper.
func bunTree(dir string, child func(string) *exec.Cmd, appendLine func(file, line string)) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	c := child("workerd")
	stop := func() int {
		c.Process.Kill()
		c.Wait()
		return 0
	}
	for {
		if _, err := os.Stat(fmt.Sprintf("%s/workerd-%d", dir, c.Process.Pid)); err == nil {
			break
		}
		select {
		case <-term:
			return stop()
		case <-time.After(time.Millisecond):
		}
	}
	appendLine("pids", fmt.Sprintf("%d %d", os.Getpid(), c.Process.Pid))
	<-term
	return stop()
}

// waitFile waits (a minute at most: a loaded machine is slow, a lost
// test is not) until path exists.
func waitFile(path string) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// leafReady waits until the "leaf" c has created dir/leaf-<pid>, that is,
// ignores SIGTERM, and returns c.
func leafReady(dir string, c *exec.Cmd) *exec.Cmd {
	waitFile(fmt.Sprintf("%s/leaf-%d", dir, c.Process.Pid))
	return c
}

// setsidChild starts this binary as helper h in a new session.
func setsidChild(h string) *exec.Cmd {
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "HBXTEST_HELPER="+h)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return c
}

// superviseHelper is the "supervise" helper.
func superviseHelper() int {
	dir := os.Getenv("HBXTEST_DIR")
	if os.Getenv("HBXTEST_NO_SUBREAPER") != "" {
		// As under qemu-user, which does not implement the prctl.
		setSubreaper = func() error { return syscall.EINVAL }
	}
	exe, _ := os.Executable()
	s, err := New(Options{
		Programs: []Program{{
			Name:         "prog",
			Command:      []string{exe, "-test.run=^$"},
			Environment:  []string{"HBXTEST_HELPER=" + os.Getenv("HBXTEST_PROG"), "HBXTEST_DIR=" + dir, "HBXTEST_ARG=" + os.Getenv("HBXTEST_ARG")},
			Autostart:    true,
			StartSecs:    50 * time.Millisecond,
			StartRetries: 3,
			StopWait:     300 * time.Millisecond,
			Stdout:       LogFile{Path: filepath.Join(dir, "prog.out.log")},
			Stderr:       LogFile{Path: filepath.Join(dir, "prog.err.log")},
		}},
		Env:           os.Environ(),
		StateDir:      os.Getenv("HBXTEST_STATE"),
		Cgroups:       os.Getenv("HBXTEST_CGROUPS") != "",
		HandleSignals: true,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// zombie reports whether pid is a zombie.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}
