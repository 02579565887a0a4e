// Package redistest starts private redis-servers on free loopback ports for
// one test (a server, a Cluster with or without replicas, a master and
// replica watched by sentinels), and stops them when the test ends.
//
// Where redis-server is not installed the test is skipped, unless CI=true or
// SLUICE_REQUIRE_REDIS=1, where it fails: CI must never go green by skipping.
// `make test` installs redis-server.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a running redis-server owned by one test.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	// Port is the port of Addr.
	Port int
	// Dir is the server's working directory, removed with the test.
	Dir string

	cmd    *exec.Cmd
	args   []string
	exit   chan struct{}
	ownDir bool // made by StartProcess: removed by Stop
}

// Required reports whether a missing redis-server must fail a test instead of
// skipping it: CI=true or SLUICE_REQUIRE_REDIS=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SLUICE_REQUIRE_REDIS") == "1"
}

// Binary returns the path of redis-server, or fails or skips t.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found in PATH: install it (Debian: apt-get install redis-server) or run `make test`, which does"
		if Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// Start starts a redis-server for t with extra configuration args
// ("--cluster-enabled", "yes", ...) and stops it when t ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := Binary(t)
	var lastErr error
	for range 5 {
		s, err := start(t.TempDir(), bin, args)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartProcess starts a redis-server outside any test, for a TestMain that
// shares one server with a package's Example functions, which have no
// testing.T. The caller stops it with Stop, which also removes its directory.
// It fails when redis-server is not installed (see Installed).
func StartProcess(args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, err
		}
		s, err := start(dir, bin, args)
		if err == nil {
			s.ownDir = true
			return s, nil
		}
		_ = os.RemoveAll(dir)
		lastErr = err
	}
	return nil, lastErr
}

// Installed reports whether redis-server is in PATH.
func Installed() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

func start(dir, bin string, extra []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
	}, extra...)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir, args: args}
	if err := s.launch(bin); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) launch(bin string) error {
	cmd := exec.Command(bin, s.args...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	s.exit = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.exit) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exit:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server exited at start: %s", lastLines(string(log), 5))
		default:
		}
		if reply, err := s.Do("PING"); err == nil && reply == "PONG" {
			// The port was free when picked, but another server may have
			// taken it since: only this process's answer will do.
			info, err := s.Do("INFO", "server")
			if err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				return nil
			}
			s.Stop()
			return fmt.Errorf("another redis-server answers on port %d", s.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return errors.New("redis-server did not answer PING within 10s")
}

// Stop kills the server and waits for it to exit. Stopping twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exit:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
	if s.ownDir {
		_ = os.RemoveAll(s.Dir)
	}
}

// Pause stops the server's process (SIGSTOP) without closing its sockets:
// clients hang as they would on a stalled server.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Restart starts the server again on the same port after Stop.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 50 {
		if err = s.launch(Binary(t)); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: restart: %v", err)
}

// Do sends one command over a fresh connection and returns the reply of a
// simple string, integer or bulk string as text. It is for set-up and checks,
// not for the code under test.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// DeadAddr returns a loopback address nothing listens on: every dial to it
// is refused at once, as to a Redis that is down.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
