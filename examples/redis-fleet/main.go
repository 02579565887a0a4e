// Command redis-fleet runs two instances of a service, as two processes, that
// share one rate limit kept in Redis (package redislimit), then stops Redis to
// show what each failure policy does while Redis cannot decide.
//
// Every instance serves three routes limited to 6 requests a minute per API
// key, the same limit with three failure policies:
//
//   - /local  falls back to a local limiter holding this instance's share
//     (6 / 2 instances = 3 a minute): the fleet still admits about its limit;
//   - /open   admits everything: availability over the limit;
//   - /closed rejects everything with 503: the limit over availability.
//
// The program starts a private redis-server on a free loopback port (it must
// be in PATH), starts itself twice as the instances, sends requests to both,
// and prints what comes back.
//
//	go run ./examples/redis-fleet
//
// Or keep Redis and the two instances up, and try them by hand (-redis
// host:port uses a Redis of your own instead):
//
//	go run ./examples/redis-fleet -serve
//	curl -i -H 'X-Api-Key: alice' http://<printed address>/local
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

// The environment variables that make the program an instance: its name and
// the Redis it shares.
const (
	envInstance = "REDIS_FLEET_INSTANCE"
	envRedis    = "REDIS_FLEET_REDIS"
)

// instances is the number of instances the limit is shared by.
const instances = 2

func main() {
	if name := os.Getenv(envInstance); name != "" {
		os.Exit(instanceMain(name, os.Getenv(envRedis), os.Stdin, os.Stdout))
	}
	serve := flag.Bool("serve", false, "start Redis and two instances and keep them up until Ctrl-C")
	redisAddr := flag.String("redis", "", "with -serve, a running Redis for the instances to share instead of a private one")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *serve {
		err = serveUntil(ctx, *redisAddr, os.Stdout)
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis-fleet:", err)
		os.Exit(1)
	}
}

// ---- one instance ----

// instanceMain runs one instance: it serves on a free loopback port, prints
// "listening <addr>" on out, and stops when in is closed (its parent is gone).
func instanceMain(name, redisAddr string, in io.Reader, out io.Writer) int {
	if err := runInstance(name, redisAddr, in, out); err != nil {
		fmt.Fprintf(os.Stderr, "instance %s: %v\n", name, err)
		return 1
	}
	return 0
}

func runInstance(name, redisAddr string, in io.Reader, out io.Writer) error {
	// Ctrl-C reaches the whole process group: the parent decides when its
	// instances stop, by closing their stdin.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	// The limiters' own client: no retries (a script sent again after a
	// timeout could charge twice) and the limiters' short deadlines honoured.
	client := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()

	routes := map[string]redislimit.Option{
		"GET /local":  redislimit.WithLocalFallback(instances),
		"GET /open":   redislimit.WithFailOpen(),
		"GET /closed": redislimit.WithFailClosed(),
	}
	opts := []middleware.RoutesOption{}
	var guards []*sluice.Guard
	defer func() {
		for _, g := range guards {
			g.Close()
		}
	}()
	for route, policy := range routes {
		// The name is part of the Redis keys: every instance must give a
		// limit the same name to share it.
		limitName := "fleet" + strings.TrimPrefix(route, "GET ")
		limiter, err := redislimit.NewGCRA(client, ratelimit.PerMinute(6), 6, policy,
			redislimit.WithName(limitName),
			// Two failed calls open the breaker around Redis: after that, an
			// outage costs the requests nothing.
			redislimit.WithBreaker(2, time.Second))
		if err != nil {
			return err
		}
		g, err := sluice.New(sluice.With(limiter))
		if err != nil {
			return err
		}
		guards = append(guards, g)
		opts = append(opts, middleware.RouteTo(route, g))
	}
	table, err := middleware.NewRoutes(opts...)
	if err != nil {
		return err
	}
	keyer, err := middleware.NewKeyer(middleware.RejectMissingKey(), middleware.KeyByHeader("X-Api-Key"))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	for route := range routes {
		mux.HandleFunc(route, func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "served by %s\n", name)
		})
	}
	handler := sluicehttp.Middleware(sluicehttp.WithRoutes(table), sluicehttp.WithKeyer(keyer))(mux)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())

	_, _ = io.Copy(io.Discard, in) // until the parent closes our stdin
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(ctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// ---- the parent: Redis, two instances, a client ----

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

// run starts Redis and two instances and plays the demonstration.
func run(ctx context.Context, out io.Writer) (err error) {
	rs, err := startRedis()
	if err != nil {
		return err
	}
	defer func() {
		if rs != nil {
			rs.stop()
		}
	}()
	fleet, err := startFleet(rs.addr)
	if err != nil {
		return err
	}
	defer func() {
		for _, i := range fleet {
			err = errors.Join(err, i.stop())
		}
	}()
	a, b := fleet[0], fleet[1]
	c := &client{out: out, http: &http.Client{Timeout: 5 * time.Second}}
	defer c.http.CloseIdleConnections()

	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("1. instances A and B share alice's limit of 6 a minute in Redis:")
	say("   whichever instance she reaches, the 7th request is refused")
	for n := range 8 {
		if err := c.show(ctx, []*instance{a, b}[n%2], "/local", "alice"); err != nil {
			return err
		}
	}

	say("\n2. Redis stops; each route's failure policy decides")
	rs.stop()
	rs = nil
	say("   /local: each instance keeps its share, 6 / 2 = 3 a minute, for bob")
	for _, i := range []*instance{a, a, a, a, b} {
		if err := c.show(ctx, i, "/local", "bob"); err != nil {
			return err
		}
	}
	say("   /open: everything is admitted")
	for _, i := range []*instance{a, b} {
		if err := c.show(ctx, i, "/open", "bob"); err != nil {
			return err
		}
	}
	say("   /closed: everything is refused with 503")
	for _, i := range []*instance{a, b} {
		if err := c.show(ctx, i, "/closed", "bob"); err != nil {
			return err
		}
	}
	return nil
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

// client sends the demonstration's requests and prints their answers.
type client struct {
	out  io.Writer
	http *http.Client
}

// show sends GET path to instance i with the API key key, and prints the
// status and the fields the limit set.
func (c *client) show(ctx context.Context, i *instance, path, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+i.addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "   %s %-7s %-5s -> %d", i.name, path, key, resp.StatusCode)
	for _, f := range []string{"RateLimit", "Retry-After"} {
		if v := resp.Header.Get(f); v != "" {
			fmt.Fprintf(c.out, "  %s: %s", f, v)
		}
	}
	fmt.Fprintln(c.out)
	return nil
}
