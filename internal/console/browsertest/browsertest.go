// Package browsertest starts Debian's chromium headless for the console's
// browser tests and its screenshots, driven by chromedp.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inboxd/inboxd/internal/testkit"
)

// Chromium is where Debian's chromium package puts the browser.
const Chromium = "/usr/bin/chromium"

// Timeout bounds a whole browser test.
const Timeout = 2 * time.Minute

// Start starts a headless chromium of its own (a temporary profile) for t
// and returns a browser context, cancelled and the browser stopped when t
// ends. A missing chromium ends t through testkit.Unavailable: skipped on a
// developer's machine, failed under CI=true.
func Start(t testing.TB) context.Context {
	t.Helper()
	path := Chromium
	if _, err := os.Stat(path); err != nil {
		p, lerr := exec.LookPath("chromium")
		if lerr != nil {
			testkit.Unavailable(t, "chromium is not installed (Debian package chromium)")
		}
		path = p
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelCtx := chromedp.NewContext(actx)
	// The first run starts the browser, on a context without a timeout
	// (a timeout there would stop the browser itself).
	if err := chromedp.Do(bctx); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(bctx, Timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}
