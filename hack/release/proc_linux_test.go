package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The helper test is the test binary run again by the two tests below, as
// make release-check runs it: it starts `go run` of a program that sleeps,
// through goCmd, the way the release check starts every go command. The go
// command runs the program as a child of its own, so killing the go command
// alone would leave the program behind.
const helperEnv = "RELEASE_TEST_SLEEPER"

func TestHelperRunsASleeper(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("run by TestCancelledCommandLeavesNoProcess and TestChildPastTheTestTimeoutIsKilledFirst")
	}
	goCmd(t, sleeperEnv(), dir, "run", ".", filepath.Join(dir, "pid"))
}

// sleeper writes a module whose program writes its pid to the file it is
// given and sleeps; the program is built once first, so that the helper's go
// run starts it from the build cache at once.
func sleeper(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/sleeper\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(dir, "main.go"), `package main

import (
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		return
	}
	if err := os.WriteFile(os.Args[1], []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		panic(err)
	}
	time.Sleep(time.Hour)
}
`)
	goCmd(t, sleeperEnv(), dir, "run", ".")
	return dir
}

func sleeperEnv() []string { return append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false") }

// startHelper runs the test binary's helper test with the sleeper in dir and
// returns it with its output, and the sleeper's pid once the sleeper runs.
func startHelper(t *testing.T, dir string, timeout time.Duration) (*exec.Cmd, *bytes.Buffer, int) {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperRunsASleeper$", "-test.timeout="+timeout.String(), "-test.v")
	var out bytes.Buffer
	helper.Env, helper.Stdout, helper.Stderr = append(os.Environ(), helperEnv+"="+dir), &out, &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill() }) // a test that waits for it has run Wait
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if data, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil && len(data) > 0 {
			pid, err := strconv.Atoi(string(data))
			if err != nil {
				t.Fatal(err)
			}
			return helper, &out, pid
		}
	}
	t.Fatalf("the sleeper did not start within %v:\n%s", timeout, out.String())
	return nil, nil, 0
}

// running reports whether the process pid exists and is not a zombie (a
// killed orphan waits there for init to reap it).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// gone waits a little for pid to stop running.
func gone(pid int) bool {
	for range 100 {
		if !running(pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// Interrupting make release-check (SIGINT to the test binary, as a terminal
// sends it; the go commands, in groups of their own, do not receive it) kills
// every process the running go command started, and the binary exits.
func TestCancelledCommandLeavesNoProcess(t *testing.T) {
	dir := sleeper(t)
	helper, out, pid := startHelper(t, dir, 2*time.Minute)
	if err := helper.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- helper.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the interrupted test binary exited 0:\n%s", out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the interrupted test binary still runs a minute later:\n%s", out.String())
	}
	if !gone(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the go command's child %d still runs after the test binary was interrupted and exited:\n%s", pid, out.String())
	}
	if !strings.Contains(out.String(), "the test binary was interrupted") {
		t.Errorf("the helper's failure does not say it was interrupted:\n%s", out.String())
	}
}

// A go command still running as the test binary's -timeout nears is killed,
// with every process it started, before the timeout's panic exits the binary
// and orphans them; the test fails saying so.
func TestChildPastTheTestTimeoutIsKilledFirst(t *testing.T) {
	dir := sleeper(t)
	const timeout = 15 * time.Second
	helper, out, pid := startHelper(t, dir, timeout)
	done := make(chan error, 1)
	go func() { done <- helper.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout + time.Minute):
		t.Fatalf("the helper still runs a minute past its -timeout of %v:\n%s", timeout, out.String())
	}
	if !gone(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the go command's child %d outlived the test binary's -timeout:\n%s", pid, out.String())
	}
	if s := out.String(); !strings.Contains(s, "before the test binary's -timeout ran out") || strings.Contains(s, "panic: test timed out") {
		t.Errorf("want the helper to fail on its own kill before the -timeout, not on the timeout's panic:\n%s", s)
	}
}
