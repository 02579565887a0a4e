package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplicatedCluster starts a Redis Cluster of masters masters, each with
// one replica, on free loopback ports, with the given cluster-node-timeout:
// a master that stops answering for that long is failed over to its replica.
// A slot not served stops only its own keys (cluster-require-full-coverage
// no). The masters are c.Servers, in slot order, and Replicas[i] replicates
// Servers[i]. It returns when every node reports cluster_state:ok and every
// replica is in sync with its master. The servers stop when t ends.
func StartReplicatedCluster(t testing.TB, masters int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	if masters < 1 || nodeTimeout < time.Millisecond {
		t.Fatalf("redistest: StartReplicatedCluster(%d, %v): want at least 1 master and a timeout of 1ms or more", masters, nodeTimeout)
	}
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		"--cluster-require-full-coverage", "no",
		"--repl-diskless-sync-delay", "0", // a replica syncs at once, not 5s later
	}
	c := &Cluster{}
	for range masters {
		c.Servers = append(c.Servers, Start(t, args...))
	}
	for range masters {
		c.Replicas = append(c.Replicas, Start(t, args...))
	}
	c.assignSlots(t)
	all := append(append([]*Server{}, c.Servers...), c.Replicas...)
	for _, s := range all[1:] {
		if _, err := all[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port)); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr, err)
		}
	}
	c.waitOK(t, len(all))
	deadline := time.Now().Add(20 * time.Second)
	for i, r := range c.Replicas {
		id, err := c.Servers[i].Do("CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID %s: %v", c.Servers[i].Addr, err)
		}
		// The replica may not know its master's ID yet: gossip spreads it.
		for {
			_, err = r.Do("CLUSTER", "REPLICATE", id)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: CLUSTER REPLICATE on %s: %v", r.Addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, r := range c.Replicas {
		waitInSync(t, r, deadline)
	}
	c.waitOK(t, len(all))
	return c
}

// waitInSync waits until the replica r has its master's data and link up.
func waitInSync(t testing.TB, r *Server, deadline time.Time) {
	t.Helper()
	for {
		info, err := r.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") &&
			strings.Contains(info, "master_sync_in_progress:0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not in sync: %q %v", r.Addr, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Role returns the replication role s reports (ROLE): "master" or "slave".
func (s *Server) Role() (string, error) {
	reply, err := s.Do("ROLE")
	if err != nil {
		return "", err
	}
	role, _, _ := strings.Cut(reply, "\n")
	return role, nil
}

// Sentinel is a master, one replica of it, and three sentinels watching
// them under the name MasterName, each a Server owned by one test.
type Sentinel struct {
	Master, Replica *Server
	// Sentinels are the sentinels; SentinelAddrs their addresses.
	Sentinels []*Server
	// MasterName is the name the sentinels know the master by.
	MasterName string
}

// SentinelAddrs returns the sentinels' addresses, for a failover client.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, x := range s.Sentinels {
		addrs[i] = x.Addr
	}
	return addrs
}

// StartSentinel starts a master, its replica and three sentinels (redis-server
// in sentinel mode, quorum 2) on free loopback ports. The sentinels consider
// the master down after downAfter without an answer and then promote the
// replica. It returns when the replica is in sync and every sentinel knows
// the replica and the other sentinels. The servers stop when t ends.
func StartSentinel(t testing.TB, downAfter time.Duration) *Sentinel {
	t.Helper()
	if downAfter < time.Millisecond {
		t.Fatalf("redistest: StartSentinel(%v): want a down-after time of 1ms or more", downAfter)
	}
	st := &Sentinel{MasterName: "sluice-test"}
	st.Master = Start(t, "--repl-diskless-sync-delay", "0")
	st.Replica = Start(t, "--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", strconv.Itoa(st.Master.Port))
	deadline := time.Now().Add(20 * time.Second)
	waitInSync(t, st.Replica, deadline)
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		st.MasterName, st.Master.Port, downAfter.Milliseconds(), 3*downAfter.Milliseconds()+1000)
	bin := Binary(t)
	for range 3 {
		st.Sentinels = append(st.Sentinels, startSentinel(t, bin, conf))
	}
	for _, s := range st.Sentinels {
		for {
			reply, err := s.Do("SENTINEL", "MASTER", st.MasterName)
			if err == nil && strings.Contains(reply, "num-slaves\n1\n") && strings.Contains(reply, "num-other-sentinels\n2\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s does not see the replica and the other sentinels: %q %v", s.Addr, reply, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return st
}

// startSentinel starts one redis-server in sentinel mode with configuration
// conf, which it rewrites in its own directory.
func startSentinel(t testing.TB, bin, conf string) *Server {
	t.Helper()
	var lastErr error
	for range 5 {
		dir := t.TempDir()
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir, args: []string{
			path, "--sentinel",
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"),
			"--daemonize", "no",
		}}
		if lastErr = s.launch(bin); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: could not start a sentinel: %v", lastErr)
	return nil
}
