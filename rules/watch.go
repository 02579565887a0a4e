package rules

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// quiet is how long the file's directory must be still after an event
// before the file is loaded again: an editor's save, a ConfigMap's swap,
// each a burst of events, load once.
const quiet = 100 * time.Millisecond

// longestBurst is the longest a burst of events holds a reload back: a file
// beside the rules file written more often than quiet (a heartbeat, a log)
// would otherwise hold an edit back for good.
const longestBurst = time.Second

// watcher is a running Watch: a goroutine that hears the file's directory,
// and one that loads the file once a burst of events is over.
type watcher struct {
	fs   *fsnotify.Watcher
	done chan struct{}
	ends chan struct{} // each goroutine sends once as it ends
	// dir is the file's directory, and target the directory of the file
	// its symlinks lead to, when that is another: an edit made there
	// shows in target only. Only listen changes target.
	dir, target string
}

// Watch starts watching the file's directory, and loads the file again
// (see Reload) 100 ms after the last of a burst of changes there, or 1 s
// after its first while the changes go on. Watching
// the directory rather than the file sees a file replaced by a rename (as
// editors save) and the symlink swap by which Kubernetes updates a
// mounted ConfigMap. A file that is a symlink into another directory has
// that directory watched too, which its link leads to at each event. A
// file removed keeps the rules in force, until one is
// written again. Watch starts two goroutines, which Close stops; it fails
// when the Loader is closed or watches already.
func (l *Loader) Watch() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return errors.New("rules: Watch after Close")
	case l.w != nil:
		return errors.New("rules: Watch called twice")
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: Watch: %w", err)
	}
	w := &watcher{fs: fw, done: make(chan struct{}), ends: make(chan struct{}, 2), dir: filepath.Dir(l.path)}
	if err := fw.Add(w.dir); err != nil {
		_ = fw.Close()
		return fmt.Errorf("rules: Watch: %w", err)
	}
	w.follow(l)
	kick := make(chan struct{}, 1)
	go func() {
		defer func() { w.ends <- struct{}{} }()
		w.listen(l, kick)
	}()
	go func() {
		defer func() { w.ends <- struct{}{} }()
		debounce(kick, quiet, longestBurst, w.done, func() { _ = l.Reload() })
	}()
	l.w = w
	return nil
}

// listen passes on, to kick, every event of the directory until the
// fsnotify watcher is closed. Any event may concern the file (a rename
// over it, a swap of the ..data symlink it points through), and a reload
// of an unchanged file changes nothing, so none is told apart.
func (w *watcher) listen(l *Loader, kick chan<- struct{}) {
	for {
		select {
		case _, ok := <-w.fs.Events:
			if !ok {
				return
			}
			w.follow(l)
			select {
			case kick <- struct{}{}:
			default:
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			l.log.Error("sluice rules: watching the file", "file", l.path, "error", err)
		}
	}
}

// follow watches the directory of the file l.path's symlinks lead to now,
// when it is not the file's own, in place of the one they led to before.
// A link that leads nowhere (the file removed) leaves the last one
// watched.
func (w *watcher) follow(l *Loader) {
	real, err := filepath.EvalSymlinks(l.path)
	if err != nil {
		return
	}
	dir, err := filepath.Abs(filepath.Dir(real))
	if err != nil {
		return
	}
	// The file's own directory, watched already, as a path of its own and
	// as the one its links lead to (the path may be relative, or pass
	// through a link).
	if own, err := filepath.Abs(w.dir); err == nil && dir == own {
		dir = ""
	} else if r, err := filepath.EvalSymlinks(own); err == nil && dir == r {
		dir = ""
	}
	if dir == w.target {
		return
	}
	if w.target != "" {
		_ = w.fs.Remove(w.target) // gone with its directory, perhaps
	}
	w.target = ""
	if dir == "" {
		return
	}
	if err := w.fs.Add(dir); err != nil {
		l.log.Error("sluice rules: watching the directory the file's link leads to", "file", l.path, "dir", dir, "error", err)
		return
	}
	w.target = dir
}

func (w *watcher) stop() {
	close(w.done)
	_ = w.fs.Close()
	<-w.ends
	<-w.ends
}

// debounce calls fire once events has been quiet for d after a burst of
// sends, or once the burst has lasted longest, until stop is closed.
func debounce(events <-chan struct{}, d, longest time.Duration, stop <-chan struct{}, fire func()) {
	t := time.NewTimer(d)
	t.Stop()
	var began time.Time // the first send of the burst; zero between bursts
	for {
		select {
		case <-stop:
			t.Stop()
			return
		case <-events:
			now := time.Now()
			if began.IsZero() {
				began = now
			}
			t.Reset(max(min(d, began.Add(longest).Sub(now)), 0))
		case <-t.C:
			began = time.Time{}
			fire()
		}
	}
}
