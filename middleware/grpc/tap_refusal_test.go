package sluicegrpc

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
)

// ServerInHandle's refusal of a Guard whose policy may wait names the Guard
// and the policy, and says how to make one that does not: the README's
// default shedder queues.
func TestTheTapsRefusalNamesTheWaitingPolicy(t *testing.T) {
	shed, err := adaptive.NewShedder()
	if err != nil {
		t.Fatal(err)
	}
	g, err := sluice.New(sluice.WithName("grpc-front"), sluice.With(shed))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, err = ServerInHandle(WithGuard(g))
	if err == nil {
		t.Fatal("ServerInHandle accepted a Guard whose shedder queues")
	}
	msg := err.Error()
	if !strings.Contains(msg, shed.Name()) {
		t.Errorf("the refusal does not name the waiting policy %q: %s", shed.Name(), msg)
	}
	if !strings.Contains(msg, "WithQueue") {
		t.Errorf("the refusal does not say how to make the shedder never wait (adaptive.WithQueue(0, 0)): %s", msg)
	}
}
