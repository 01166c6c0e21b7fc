package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/hermesbox/hbx/internal/testenv"
)

// chromium finds the Debian chromium binary; without it the test skips,
// or fails under HBXTEST_E2E=1 / CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Unavailable(t, "headless browser: no chromium (as root: apt-get install -y chromium)")
	return ""
}

// browserPage loads url in a fresh headless Chromium and returns the
// page's title, the text of its first h1 and every console error,
// uncaught exception and error log entry (a failed resource load) seen
// until shortly after the page loaded.
func browserPage(t *testing.T, url string) (title, h1 string, problems []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		// The network is closed: nothing may phone home.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	var mu sync.Mutex
	listen := func(ev any) {
		var p string
		switch e := ev.(type) {
		case *cdpruntime.EventConsoleAPICalled:
			if e.Type == cdpruntime.ConsoleAPICalledTypeError || e.Type == cdpruntime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, strings.TrimSpace(string(a.Value)+" "+a.Description))
				}
				p = fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " "))
			}
		case *cdpruntime.EventExceptionThrown:
			p = "uncaught exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				p += " " + e.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				p = fmt.Sprintf("log %s: %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL)
			}
		}
		if p != "" {
			mu.Lock()
			problems = append(problems, p)
			mu.Unlock()
		}
	}
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithListener(listen))
	defer cancelBrowser()
	for _, enable := range []cdp.Command[cdp.Empty, cdp.Empty]{cdplog.Enable, cdpruntime.Enable} {
		if _, err := chromedp.Call(bctx, enable, cdp.Empty{}); err != nil {
			t.Fatalf("headless chromium: %s: %v", enable.Method, err)
		}
	}
	err := chromedp.Do(bctx,
		chromedp.Navigate(url),
		chromedp.WaitReady(chromedp.CSS("body")),
		chromedp.Sleep(300*time.Millisecond), // late errors: deferred scripts, icons
	)
	if err == nil {
		title, err = chromedp.Run(bctx, chromedp.Title())
	}
	if err == nil {
		h1, err = chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector("h1") || {}).textContent || ""`))
	}
	if err != nil {
		t.Fatalf("headless chromium on %s: %v", url, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return title, h1, append([]string(nil), problems...)
}

// browserCheck loads Executor's setup page on port in headless Chromium
// and fails on any console error; it first proves on a missing page that
// such errors are seen at all.
func browserCheck(t *testing.T, port int) {
	start := time.Now()
	_, _, problems := browserPage(t, fmt.Sprintf("http://127.0.0.1:%d/no-such-page", port))
	if len(problems) == 0 {
		t.Errorf("a 404 page logged no error: the browser check would miss errors")
	}
	title, h1, problems := browserPage(t, fmt.Sprintf("http://127.0.0.1:%d/", port))
	if title != "Executor setup" || h1 != "Executor" {
		t.Errorf("setup page: title %q, h1 %q; want %q, %q", title, h1, "Executor setup", "Executor")
	}
	if len(problems) > 0 {
		t.Errorf("setup page: console errors:\n  %s", strings.Join(problems, "\n  "))
	}
	t.Logf("headless chromium loaded the setup page without console errors (%s, both loads)", time.Since(start).Round(time.Millisecond))
}
