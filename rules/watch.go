package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// dir is the file's directory; targets are the other directories its
	// path's links lead through: the one each link is in (repointing it
	// shows there only) and the one the path ends in (an edit made there
	// shows there only). Only listen changes targets.
	dir     string
	dirReal string // dir resolved when it was watched: where its watch is
	targets map[string]bool
}

// Watch starts watching the file's directory, and loads the file again
// (see Reload) 100 ms after the last of a burst of changes there, or 1 s
// after its first while the changes go on. Watching
// the directory rather than the file sees a file replaced by a rename (as
// editors save) and the symlink swap by which Kubernetes updates a
// mounted ConfigMap. A path through symlinks (the file's own, or a
// directory's along it, such as a deploy's current → v2) has the
// directories those links are in, and the one they lead to, watched too,
// as they lead at each event. A
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
	// Resolved as the kernel resolves it for the watch: from the working
	// directory (itself maybe reached through a link, $PWD), a ".." going
	// up from where a link leads.
	if _, end, ok := walkLinks(w.dir); ok {
		w.dirReal = end
	}
	w.follow(l)
	kick := make(chan struct{}, 1)
	go func() {
		defer func() { w.ends <- struct{}{} }()
		w.listen(l, kick)
	}()
	go func() {
		defer func() { w.ends <- struct{}{} }()
		debounce(kick, quiet, longestBurst, w.done, func() { _ = l.reload(true) })
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

// follow watches the directories l.path's links are in, and the one they
// lead to now (see watcher.targets), in place of those of before. A path
// that leads nowhere (the file removed) leaves the last ones watched.
func (w *watcher) follow(l *Loader) {
	dirs, ok := linkDirs(l.path)
	if !ok {
		return
	}
	// The file's own directory, watched already, as the directory its
	// watch is on: a second watch of it would share the first's, which
	// its removal would end.
	delete(dirs, w.dirReal)
	for d := range w.targets {
		if !dirs[d] {
			_ = w.fs.Remove(d) // gone with its directory, perhaps
			delete(w.targets, d)
		}
	}
	for d := range dirs {
		if w.targets[d] {
			continue
		}
		if err := w.fs.Add(d); err != nil {
			l.log.Error("sluice rules: watching a directory the file's path leads through", "file", l.path, "dir", d, "error", err)
			continue
		}
		if w.targets == nil {
			w.targets = map[string]bool{}
		}
		w.targets[d] = true
	}
}

// linkDirs returns the directories path leads through by its symlinks, as
// they lead now: each one a link of it is in, resolved (but the root), and
// the one it ends in. It reports false when path leads nowhere.
func linkDirs(path string) (map[string]bool, bool) {
	dirs, end, ok := walkLinks(path)
	if !ok {
		return nil, false
	}
	dirs[filepath.Dir(end)] = true
	return dirs, true
}

// walkLinks resolves path as the kernel does, component by component from
// the root (from the working directory, for a relative one): a link met
// restarts the walk with its target in its place, and a ".." goes up from
// where the links before it led (the path is not cleaned beforehand,
// which would drop a link before a ".."). It returns the directories the
// links met are in (but the root), and where path ends; false when it
// leads nowhere.
func walkLinks(path string) (map[string]bool, string, bool) {
	sep := string(filepath.Separator)
	p := path
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return nil, "", false
		}
		p = wd + sep + p
	}
	dirs := map[string]bool{}
	for hops := 0; hops < 64; hops++ {
		rest := strings.Split(p, sep)
		cur := sep
		relinked := false
		for i, c := range rest {
			switch c {
			case "", ".":
				continue
			case "..":
				cur = filepath.Dir(cur)
				continue
			}
			next := filepath.Join(cur, c)
			fi, err := os.Lstat(next)
			if err != nil {
				return nil, "", false
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				cur = next
				continue
			}
			target, err := os.Readlink(next)
			if err != nil {
				return nil, "", false
			}
			if cur != sep {
				dirs[cur] = true
			}
			if !filepath.IsAbs(target) {
				target = cur + sep + target
			}
			p = target + sep + strings.Join(rest[i+1:], sep)
			relinked = true
			break
		}
		if !relinked {
			return dirs, cur, true
		}
	}
	return nil, "", false // a loop of links
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
