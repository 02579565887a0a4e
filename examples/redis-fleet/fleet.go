package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// instance is a running instance process.
type instance struct {
	name  string
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startInstance starts the program again as the instance name and waits
// for its address.
func startInstance(name, redisAddr string) (*instance, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envInstance+"="+name, envRedis+"="+redisAddr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("instance %s did not start: %q %v", name, line, err)
	}
	return &instance{name: name, addr: addr, cmd: cmd, stdin: stdin}, nil
}

// stop closes the instance's stdin, which makes it shut down, and waits.
func (i *instance) stop() error {
	i.stdin.Close()
	return i.cmd.Wait()
}

// redisServer is a private redis-server process.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a free loopback port, with nothing saved
// to disk, and waits until it answers.
func startRedis() (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found in PATH; install it (Debian/Ubuntu: apt-get install redis-server, macOS: brew install redis) and run again")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if ping(r.addr) == nil {
			return r, nil
		}
		time.Sleep(20 * time.Millisecond) // redis-server takes a few ms to listen
	}
	r.stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING", r.addr)
}

// ping sends a PING in the Redis protocol and expects PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// stop kills redis-server and waits for it.
func (r *redisServer) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// startFleet starts the instances A and B against redisAddr.
func startFleet(redisAddr string) ([]*instance, error) {
	var fleet []*instance
	for _, name := range []string{"A", "B"} {
		i, err := startInstance(name, redisAddr)
		if err != nil {
			for _, i := range fleet {
				_ = i.stop()
			}
			return nil, err
		}
		fleet = append(fleet, i)
	}
	return fleet, nil
}

// serveUntil starts the two instances against redisAddr, or against a
// private redis-server when it is "", and keeps them up until ctx ends.
func serveUntil(ctx context.Context, redisAddr string, out io.Writer) error {
	if redisAddr == "" {
		rs, err := startRedis()
		if err != nil {
			return err
		}
		defer rs.stop()
		redisAddr = rs.addr
		fmt.Fprintf(out, "redis-server on %s\n", rs.addr)
	}
	fleet, err := startFleet(redisAddr)
	if err != nil {
		return err
	}
	for _, i := range fleet {
		fmt.Fprintf(out, "instance %s on http://%s (routes /local, /open, /closed; send X-Api-Key)\n", i.name, i.addr)
	}
	fmt.Fprintln(out, "Ctrl-C to stop")
	<-ctx.Done()
	for _, i := range fleet {
		err = errors.Join(err, i.stop())
	}
	return err
}
