package degrade

import (
	"fmt"
	"sync"
)

// Registry keeps switches by name, so an operator's endpoint or a config
// reload can list them (States) and find one to set, pin or unpin (Get). Its zero value is an empty
// registry ready to use; it is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	switches map[string]*Switch
}

// Add registers switches; it fails, adding none, when a name is taken or a
// switch is nil.
func (r *Registry) Add(switches ...*Switch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool, len(switches))
	for i, s := range switches {
		if s == nil {
			return fmt.Errorf("degrade: Registry.Add: switch %d is nil", i)
		}
		if _, ok := r.switches[s.name]; ok || seen[s.name] {
			return fmt.Errorf("degrade: Registry.Add: a switch named %q is registered", s.name)
		}
		seen[s.name] = true
	}
	if r.switches == nil {
		r.switches = make(map[string]*Switch, len(switches))
	}
	for _, s := range switches {
		r.switches[s.name] = s
	}
	return nil
}

// Get returns the switch named name, and whether there is one.
func (r *Registry) Get(name string) (*Switch, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.switches[name]
	return s, ok
}

// States returns whether each registered switch is on, by name.
func (r *Registry) States() map[string]bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := make(map[string]bool, len(r.switches))
	for n, s := range r.switches {
		m[n] = s.On()
	}
	return m
}
