package rules

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fsnotify tests wait on the OS's notifications: a bounded real wait,
// of at most one second for an edit to be applied.
const applied = time.Second

func watching(t *testing.T, content string) (*Loader, string) {
	t.Helper()
	l, path := newLoader(t, content)
	require.NoError(t, l.Watch())
	return l, path
}

func waitVersion(t *testing.T, l *Loader, n uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return l.Version().N == n }, applied, 5*time.Millisecond,
		"version %d not loaded within %v; status %+v", n, applied, l.Status())
}

func TestWatchAppliesAnEditWithinASecond(t *testing.T) {
	l, path := watching(t, twoLimits)
	h := serve(t, l)
	assert.Equal(t, []int{200, 429}, statuses(h, "/cart", 2))
	writeRules(t, path, strings.Replace(twoLimits, "limit: 1, window: 1m", "limit: 1, window: 2m", 1))
	waitVersion(t, l, 2)
	assert.Contains(t, l.Status().Changes[0], "policy cart-window:")
}

func TestWatchSeesARenameOverTheFile(t *testing.T) {
	l, path := watching(t, twoLimits)
	tmp := filepath.Join(filepath.Dir(path), ".rules.yaml.swp")
	writeRules(t, tmp, strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	require.NoError(t, os.Rename(tmp, path))
	waitVersion(t, l, 2)
}

// TestWatchSeesAConfigMapSwap lays out a directory as Kubernetes mounts a
// ConfigMap: rules.yaml → ..data/rules.yaml, ..data → a timestamped
// directory; an update writes a new directory and renames a new ..data
// symlink over the old one.
func TestWatchSeesAConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mount := func(name, content string) {
		require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o755))
		writeRules(t, filepath.Join(dir, name, "rules.yaml"), content)
	}
	mount("..2026_01", twoLimits)
	require.NoError(t, os.Symlink("..2026_01", filepath.Join(dir, "..data")))
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.Symlink(filepath.Join("..data", "rules.yaml"), path))
	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())

	mount("..2026_02", strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	require.NoError(t, os.Symlink("..2026_02", filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01")))
	waitVersion(t, l, 2)
}

// A rules file that is a symlink into another directory (a shared config
// linked into place) is edited where it is: Watch hears that directory
// too, and the one the link leads to once it is pointed elsewhere.
func TestWatchFollowsASymlinkIntoAnotherDirectory(t *testing.T) {
	real := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, real, twoLimits)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.Symlink(real, path))
	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())
	writeRules(t, real, strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	waitVersion(t, l, 2)

	moved := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, moved, strings.Replace(twoLimits, "burst: 3", "burst: 5", 1))
	tmp := path + ".tmp"
	require.NoError(t, os.Symlink(moved, tmp))
	require.NoError(t, os.Rename(tmp, path))
	waitVersion(t, l, 3)
	writeRules(t, moved, strings.Replace(twoLimits, "burst: 3", "burst: 6", 1))
	waitVersion(t, l, 4)
}

func TestWatchKeepsTheRulesWhenTheFileGoesAndLoadsItsReturn(t *testing.T) {
	l, path := watching(t, twoLimits)
	require.NoError(t, os.Remove(path))
	require.Eventually(t, func() bool { return l.Status().Err != nil }, applied, 5*time.Millisecond)
	assert.ErrorIs(t, l.Status().Err, os.ErrNotExist)
	assert.Equal(t, uint64(1), l.Version().N)
	_, ok := l.Guard("items")
	assert.True(t, ok)

	writeRules(t, path, strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	waitVersion(t, l, 2)
	assert.NoError(t, l.Status().Err)
}

func TestWatchReportsABrokenFileAndKeepsTheRules(t *testing.T) {
	l, path := watching(t, twoLimits)
	writeRules(t, path, "guards: [")
	require.Eventually(t, func() bool { return l.Status().Failures == 1 }, applied, 5*time.Millisecond)
	assert.Equal(t, uint64(1), l.Version().N)
	assert.ErrorContains(t, l.Status().Err, "rules.yaml")
}

func TestWatchTwiceFails(t *testing.T) {
	l, _ := watching(t, twoLimits)
	assert.Error(t, l.Watch())
}

// debouncing runs debounce with a quiet period of 100 ms and bursts of at
// most 1 s, until stop is closed (then done is), noting when it fires.
func debouncing() (events, stop, done chan struct{}, fired *[]time.Duration) {
	events, stop, done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	fired = new([]time.Duration)
	start := time.Now()
	go func() {
		defer close(done)
		debounce(events, 100*time.Millisecond, time.Second, stop, func() { *fired = append(*fired, time.Since(start)) })
	}()
	return events, stop, done, fired
}

func TestDebounceFiresOnceAfterABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events, stop, done, fired := debouncing()
		// A burst: five events 30 ms apart, then quiet.
		for range 5 {
			events <- struct{}{}
			time.Sleep(30 * time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, []time.Duration{220 * time.Millisecond}, *fired, "once, 100 ms after the last event at 120 ms")

		// A lone event later fires on its own.
		events <- struct{}{}
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, []time.Duration{220 * time.Millisecond, 1250 * time.Millisecond}, *fired)

		// An event whose quiet period is cut short by stop never fires.
		events <- struct{}{}
		close(stop)
		<-done
		time.Sleep(time.Second)
		assert.Len(t, *fired, 2)
	})
}

// Events that never stop for the quiet period (a file beside the rules
// file written every 20 ms) hold a reload back no longer than the longest
// burst: it fires a second after the burst began, and again a second later.
func TestDebounceFiresWithinTheLongestBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events, stop, done, fired := debouncing()
		for range 125 { // 2.5 s
			events <- struct{}{}
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		<-done
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, *fired)
	})
}

// A rules file named by a relative path, turned into a link to another
// directory and then replaced in its own: both are heard (the directory
// the link led to is the other one, not the file's own, which stays
// watched).
func TestWatchOfARelativePathKeepsItsOwnDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	writeRules(t, "rules.yaml", twoLimits)
	l, err := New("rules.yaml", WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())

	// The file becomes a link into a shared directory: heard.
	shared := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, shared, strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	require.NoError(t, os.Symlink(shared, "rules.yaml.tmp"))
	require.NoError(t, os.Rename("rules.yaml.tmp", "rules.yaml"))
	waitVersion(t, l, 2)

	// The file is replaced, in its own directory, by a file of its own.
	writeRules(t, "rules.yaml.tmp", strings.Replace(twoLimits, "burst: 3", "burst: 5", 1))
	require.NoError(t, os.Rename("rules.yaml.tmp", "rules.yaml"))
	waitVersion(t, l, 3)
}

// releases lays out base/v1/rules.yaml (twoLimits) and base/v2/rules.yaml
// (burst 4), and base/current → v1.
func releases(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		require.NoError(t, os.Mkdir(filepath.Join(base, v), 0o755))
	}
	writeRules(t, filepath.Join(base, "v1", "rules.yaml"), twoLimits)
	writeRules(t, filepath.Join(base, "v2", "rules.yaml"), strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	require.NoError(t, os.Symlink("v1", filepath.Join(base, "current")))
	return base
}

// retarget points base/current at v2, atomically (ln -sfn), leaving v1.
func retarget(t *testing.T, base string) {
	t.Helper()
	tmp := filepath.Join(base, "current.tmp")
	require.NoError(t, os.Symlink("v2", tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(base, "current")))
}

// A rules file reached through a directory link (a release's "current"
// link, as deploys lay them out) is reloaded when the link is pointed at a
// new release: the directory the link is in is watched too.
func TestWatchSeesTheFilesDirectoryLinkRetargeted(t *testing.T) {
	base := releases(t)
	path := filepath.Join(base, "current", "rules.yaml")
	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())

	retarget(t, base)
	waitVersion(t, l, 2)
	writeRules(t, filepath.Join(base, "v2", "rules.yaml"), strings.Replace(twoLimits, "burst: 3", "burst: 5", 1))
	waitVersion(t, l, 3)
}

// The same with a link to a file through a directory link: rules.yaml →
// base/current/rules.yaml, current → v1; current swapped in base.
func TestWatchSeesALinkAlongTheFilesLinkRetargeted(t *testing.T) {
	base := releases(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.Symlink(filepath.Join(base, "current", "rules.yaml"), path))
	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())

	retarget(t, base)
	waitVersion(t, l, 2)
}

// An event beside a rules file that fails to load (broken, or removed),
// such as a log or an editor's swap file written there, does not report
// the same failure again: no other failure counted, logged, or told to
// OnReload.
func TestWatchDoesNotReportTheSameFailureAgainOnUnrelatedEvents(t *testing.T) {
	for name, fail := range map[string]func(t *testing.T, path string){
		"broken":  func(t *testing.T, path string) { writeRules(t, path, "guards: [") },
		"missing": func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) },
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int64
			l, path := newLoader(t, twoLimits, OnReload(func(Status) { calls.Add(1) }))
			require.NoError(t, l.Watch())
			fail(t, path)
			require.Eventually(t, func() bool { return l.Status().Failures == 1 }, applied, 5*time.Millisecond)
			for i := range 3 {
				writeRules(t, filepath.Join(filepath.Dir(path), "other.log"), strings.Repeat("x", i+1))
				time.Sleep(300 * time.Millisecond)
			}
			assert.Equal(t, uint64(1), l.Status().Failures, "the rules file did not change")
			assert.Equal(t, int64(1), calls.Load(), "OnReload told of the same failure once")
		})
	}
}

// A path with a ".." after a link (base/current/../rules.yaml, current →
// releases/v1) is the file base/releases/rules.yaml, as the kernel
// resolves it: its directory is watched, and an edit of it is seen.
func TestWatchPathWithDotDotAfterALinkSeesEdits(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(base, "releases", "v1"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join("releases", "v1"), filepath.Join(base, "current")))
	real := filepath.Join(base, "releases", "rules.yaml")
	writeRules(t, real, twoLimits)
	path := filepath.Join(base, "current") + string(filepath.Separator) + ".." + string(filepath.Separator) + "rules.yaml"
	l, err := New(path, WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())

	writeRules(t, real, strings.Replace(twoLimits, "burst: 3", "burst: 4", 1))
	waitVersion(t, l, 2)
}

// Content that failed, then a missing file, then the same broken content
// again: the failure reported is the content's, not "no such file".
func TestBrokenAgainAfterMissingReportsTheParseError(t *testing.T) {
	l, path := newLoader(t, twoLimits)
	const broken = "guards: ["
	writeRules(t, path, broken)
	require.Error(t, l.reload(true))
	require.NoError(t, os.Remove(path))
	err := l.reload(true)
	require.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
	writeRules(t, path, broken)
	err = l.reload(true)
	require.Error(t, err)
	assert.False(t, errors.Is(err, fs.ErrNotExist), "the file is there, broken: %v", err)
	assert.False(t, errors.Is(l.Status().Err, fs.ErrNotExist), "Status says the file is missing: %v", l.Status().Err)
}

// A relative path that goes up ("../rules.yaml") from a working directory
// reached through a link ($PWD = A/link, link → B/real) names B/rules.yaml,
// as the kernel resolves it: its own directory's watch is on B, and B is
// not watched a second time.
func TestWatchOfDotDotFromALinkedWorkingDirectory(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	a, _ = filepath.EvalSymlinks(a)
	b, _ = filepath.EvalSymlinks(b)
	require.NoError(t, os.Mkdir(filepath.Join(b, "real"), 0o755))
	writeRules(t, filepath.Join(b, "rules.yaml"), twoLimits)
	require.NoError(t, os.Symlink(filepath.Join(b, "real"), filepath.Join(a, "link")))
	t.Chdir(filepath.Join(a, "link")) // sets $PWD to the link's path

	l, err := New(filepath.Join("..", "rules.yaml"), WithLogger(quietLog))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Watch())

	l.mu.Lock()
	w := l.w
	l.mu.Unlock()
	assert.Equal(t, b, w.dirReal, "the file's own directory, as the kernel resolves ..")
	assert.False(t, w.targets[b], "the file's own directory watched twice: targets %v", w.targets)
}
