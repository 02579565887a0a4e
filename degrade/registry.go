package degrade

import (
	"fmt"
	"slices"
	"sync"
)

// Registry keeps switches by name, so an operator's endpoint or a config
// reload can list and set them at run time. Its zero value is an empty
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

// Switch returns the switch named name, making it with opts and registering
// it when there is none yet (opts are then ignored for an existing one).
func (r *Registry) Switch(name string, opts ...SwitchOption) (*Switch, error) {
	if s, ok := r.Get(name); ok {
		return s, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.switches[name]; ok {
		return s, nil
	}
	s, err := NewSwitch(name, opts...)
	if err != nil {
		return nil, err
	}
	if r.switches == nil {
		r.switches = make(map[string]*Switch)
	}
	r.switches[name] = s
	return s, nil
}

// Get returns the switch named name, and whether there is one.
func (r *Registry) Get(name string) (*Switch, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.switches[name]
	return s, ok
}

// Set sets the switch named name by hand (as Switch.Set) and reports whether
// it flipped; it fails when there is no such switch.
func (r *Registry) Set(name string, on bool) (bool, error) {
	s, ok := r.Get(name)
	if !ok {
		return false, fmt.Errorf("degrade: Registry.Set: no switch named %q", name)
	}
	return s.Set(on), nil
}

// Pin pins the switch named name (as Switch.Pin: an Auto leaves it alone
// until Unpin) and reports whether it flipped; it fails when there is no
// such switch.
func (r *Registry) Pin(name string, on bool) (bool, error) {
	s, ok := r.Get(name)
	if !ok {
		return false, fmt.Errorf("degrade: Registry.Pin: no switch named %q", name)
	}
	return s.Pin(on), nil
}

// Unpin hands the switch named name back to its Auto (as Switch.Unpin); it
// fails when there is no such switch.
func (r *Registry) Unpin(name string) error {
	s, ok := r.Get(name)
	if !ok {
		return fmt.Errorf("degrade: Registry.Unpin: no switch named %q", name)
	}
	s.Unpin()
	return nil
}

// Names returns the names of the registered switches, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	names := make([]string, 0, len(r.switches))
	for n := range r.switches {
		names = append(names, n)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	return names
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
