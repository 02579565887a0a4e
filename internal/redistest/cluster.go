package redistest

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster, each node a Server owned by one test.
type Cluster struct {
	// Servers are the masters, in slot order: Servers[0] serves the first
	// range of slots.
	Servers []*Server
	// Replicas are the replicas, if any: Replicas[i] replicates Servers[i].
	Replicas []*Server
}

// slots is the number of slots of a Redis Cluster.
const slots = 16384

// MasterOf returns the index in Servers of the master that was given slot.
func (c *Cluster) MasterOf(slot int) int {
	n := len(c.Servers)
	for i := range n {
		if slot <= (i+1)*slots/n-1 {
			return i
		}
	}
	return n - 1
}

// Addrs returns the masters' addresses, for a cluster client's seed list.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// StartCluster starts masters cluster-enabled redis-servers on free loopback
// ports, splits the 16384 slots among them in equal ranges, joins them with
// CLUSTER MEET, and waits until every node reports cluster_state:ok. The
// servers stop when t ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: StartCluster(%d): want at least 1 master", masters)
	}
	c := &Cluster{}
	for range masters {
		c.Servers = append(c.Servers, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "yes"))
	}
	c.assignSlots(t)
	for _, s := range c.Servers[1:] {
		if _, err := c.Servers[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port)); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr, err)
		}
	}
	c.waitOK(t, masters)
	return c
}

// assignSlots splits the slots among the masters in equal ranges, in order.
func (c *Cluster) assignSlots(t testing.TB) {
	t.Helper()
	masters := len(c.Servers)
	for i, s := range c.Servers {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			// Servers before 7.0 have no ADDSLOTSRANGE.
			args := []string{"CLUSTER", "ADDSLOTS"}
			for slot := lo; slot <= hi; slot++ {
				args = append(args, strconv.Itoa(slot))
			}
			if _, err := s.Do(args...); err != nil {
				t.Fatalf("redistest: assign slots %d-%d to %s: %v", lo, hi, s.Addr, err)
			}
		}
	}
}

// waitOK waits until every node reports cluster_state:ok and knows nodes
// nodes.
func (c *Cluster) waitOK(t testing.TB, nodes int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range append(append([]*Server{}, c.Servers...), c.Replicas...) {
		for {
			info, err := s.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(nodes)+"\r") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok within 20s: node %s: %q %v", s.Addr, info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// KeySlot returns the cluster slot of key as the server computes it
// (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(t testing.TB, key string) int {
	t.Helper()
	reply, err := c.Servers[0].Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	slot, err := strconv.Atoi(reply)
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: reply %q", key, reply)
	}
	return slot
}
