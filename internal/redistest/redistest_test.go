package redistest

import (
	"os"
	"strings"
	"testing"
)

func TestServerStartPingStopRestart(t *testing.T) {
	s := Start(t)
	reply, err := s.Do("PING")
	if err != nil || reply != "PONG" {
		t.Fatalf("PING = %q, %v", reply, err)
	}
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Do("GET", "k"); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	s.Stop()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // twice is harmless
	s.Restart(t)
	if reply, err := s.Do("PING"); err != nil || reply != "PONG" {
		t.Fatalf("PING after Restart = %q, %v", reply, err)
	}
	if got, _ := s.Do("GET", "k"); got != "" {
		t.Fatalf("GET k after a restart without persistence = %q, want nothing", got)
	}
}

func TestStartProcess(t *testing.T) {
	if !Installed() {
		Binary(t) // fails under CI, skips elsewhere
	}
	s, err := StartProcess()
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := s.Do("PING"); err != nil || reply != "PONG" {
		t.Fatalf("PING = %q, %v", reply, err)
	}
	s.Stop()
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left behind: %v", s.Dir, err)
	}
}

func TestServerPauseResume(t *testing.T) {
	s := Start(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if reply, err := s.Do("PING"); err != nil || reply != "PONG" {
		t.Fatalf("PING after Resume = %q, %v", reply, err)
	}
}

func TestClusterServesAllSlots(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs = %v", c.Addrs())
	}
	for _, s := range c.Servers {
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("node %s: %q %v", s.Addr, info, err)
		}
	}
	// A tagged key's slot is its tag's slot.
	if a, b := c.KeySlot(t, "x:{user42}:y"), c.KeySlot(t, "user42"); a != b {
		t.Fatalf("slot of tagged key %d != slot of its tag %d", a, b)
	}
}

// A server launched on a port another server took meanwhile is refused, not
// taken for the other: two tests never share one server unknowingly.
func TestLaunchOnAPortTakenByAnotherServerFails(t *testing.T) {
	first := Start(t)
	second := &Server{Addr: first.Addr, Port: first.Port, Dir: t.TempDir(), args: append([]string(nil), first.args...)}
	second.args = replaceArg(second.args, "--dir", second.Dir)
	err := second.launch(Binary(t))
	second.Stop()
	if err == nil {
		t.Fatal("a launch answered by the other server's PONG succeeded")
	}
	if reply, err := first.Do("PING"); err != nil || reply != "PONG" {
		t.Fatalf("the first server: %q, %v", reply, err)
	}
}

// replaceArg returns args with the value after flag set to v.
func replaceArg(args []string, flag, v string) []string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			args[i+1] = v
		}
	}
	return args
}
