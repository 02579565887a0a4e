package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/ratelimit"
)

// tokenTTL is how long a page's token is good for.
const tokenTTL = 12 * time.Hour

// token returns a token for a page served at now: a random nonce and the
// time, signed with the Dashboard's secret. Only a page the Dashboard
// served carries one, and a page of another origin cannot read it.
func (d *Dashboard) token(now time.Time) string {
	var b [16 + 8 + 16]byte
	_, _ = rand.Read(b[:16])
	binary.BigEndian.PutUint64(b[16:24], uint64(now.Unix()))
	copy(b[24:], d.sign(b[:24]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (d *Dashboard) sign(payload []byte) []byte {
	m := hmac.New(sha256.New, d.secret[:])
	m.Write(payload)
	return m.Sum(nil)[:16]
}

// validToken reports whether tok is a token d issued within tokenTTL of now.
func (d *Dashboard) validToken(tok string, now time.Time) bool {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 40 {
		return false
	}
	if !hmac.Equal(b[24:], d.sign(b[:24])) {
		return false
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(b[16:24])), 0)
	return now.Sub(issued) < tokenTTL && !issued.After(now.Add(time.Minute))
}

// errRefused is an action refused for want of a right to take it.
var errRefused = errors.New("refused")
var errMethod = errors.New("method not allowed")

// action takes an admin action: a POST with the form fields token, guard,
// policy and name (the policy's index in the Guard's chain and its name, as
// the page showed them: a reload that changed the chain since makes the
// action an error, not one on another policy; neither for the Guard as a
// whole) or switch, action, and value for "rate" (events per second) and
// "burst".
func (d *Dashboard) action(w http.ResponseWriter, r *http.Request) {
	var err error
	var f url.Values
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		err = r.ParseForm()
		f = r.PostForm
	} else {
		f = url.Values{} // a query a cross-site link makes up names nothing
	}
	target := f.Get("guard") + " " + f.Get("policy") + f.Get("switch")
	act := f.Get("action")
	switch {
	case r.Method != http.MethodPost:
		// Refused as any other action is (a cross-site link or image
		// probing the endpoint is worth an operator's notice).
		err = fmt.Errorf("%w: admin actions are taken by POST", errMethod)
	case d.authorize == nil:
		err = fmt.Errorf("%w: admin actions are off", errRefused)
	case err != nil:
		err = fmt.Errorf("bad form: %w", err)
	case !d.hostAllowed(r.Host):
		err = fmt.Errorf("%w: unexpected Host %q (see WithHosts)", errRefused, r.Host)
	case d.csrf.Check(r) != nil:
		err = fmt.Errorf("%w: cross-origin request", errRefused)
	case !d.validToken(f.Get("token"), time.Now()):
		err = fmt.Errorf("%w: no valid page token", errRefused)
	case !d.authorize(r):
		err = fmt.Errorf("%w: not authorized", errRefused)
	default:
		var text string
		text, err = d.take(f.Get("guard"), f.Get("policy"), f.Get("name"), f.Get("switch"), act, f.Get("value"))
		if err == nil {
			d.done(w, r, act, target, text)
			return
		}
	}
	status := http.StatusBadRequest
	switch {
	case errors.Is(err, errMethod):
		status = http.StatusMethodNotAllowed
		w.Header().Set("Allow", "POST")
	case errors.Is(err, errRefused):
		status = http.StatusForbidden
	}
	d.actionsRefused.Add(1)
	// What the request named, cut short: a refusal's text (a made-up Host,
	// action or target) goes to every open page once a second.
	act, target, why := clip(act), clip(target), clip(err.Error())
	d.log.LogAttrs(r.Context(), slog.LevelWarn, "sluice dashboard: action refused",
		slog.String("action", act), slog.String("target", target), slog.String("remote", r.RemoteAddr),
		slog.String("error", why))
	d.events.add(event{Time: time.Now(), Kind: "refused", Text: clip(act + " " + target + ": " + why)})
	reply(w, status, false, err.Error())
}

func (d *Dashboard) done(w http.ResponseWriter, r *http.Request, act, target, text string) {
	d.actionsDone.Add(1)
	d.log.LogAttrs(r.Context(), slog.LevelWarn, "sluice dashboard: action taken",
		slog.String("action", act), slog.String("target", target), slog.String("remote", r.RemoteAddr),
		slog.String("result", text))
	d.events.add(event{Time: time.Now(), Kind: "action", Text: text})
	reply(w, http.StatusOK, true, text)
}

// clip cuts s to at most 200 bytes, on a rune's start, marking the cut.
func clip(s string) string {
	const most, mark = 200, "…"
	if len(s) <= most {
		return s
	}
	cut := most - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func reply(w http.ResponseWriter, status int, ok bool, text string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		OK   bool   `json:"ok"`
		Text string `json:"text"`
	}{ok, text})
}

// take takes action act on the policy at index policy, named pname, of the
// Guard named guard, or on the switch named sw, and says what it did.
func (d *Dashboard) take(guard, policy, pname, sw, act, value string) (string, error) {
	if sw != "" {
		for _, s := range d.switches {
			if s.Name() != sw {
				continue
			}
			switch act {
			case "on", "off":
				s.Pin(act == "on")
				return "switch " + sw + " pinned " + act, nil
			case "auto":
				// Back to its degrade.Auto, if it has one; pinned, it
				// heard none.
				s.Unpin()
				return "switch " + sw + " unpinned", nil
			}
			return "", fmt.Errorf("unknown action %q on a switch", act)
		}
		return "", fmt.Errorf("no switch named %q", sw)
	}
	w := d.guard(guard)
	if w == nil {
		return "", fmt.Errorf("no guard named %q", guard)
	}
	if policy == "" {
		switch act {
		case "shadow", "enforce":
			if err := w.g.SetShadow("", act == "shadow"); err != nil {
				return "", err
			}
			if act == "shadow" {
				return guard + " in shadow mode: it rejects nothing, and counts what it would", nil
			}
			return guard + " enforcing (but its policies in shadow mode by name)", nil
		}
		return "", fmt.Errorf("guard %q takes no action %q", guard, act)
	}
	i, err := strconv.Atoi(policy)
	if err != nil || i < 0 || i >= len(w.policies) {
		return "", fmt.Errorf("guard %q has no policy %q", guard, policy)
	}
	p := w.policies[i]
	if p.Name() != pname {
		// The page was drawn for another chain (a reload came between):
		// the policy it showed at i is elsewhere, or gone.
		return "", fmt.Errorf("guard %q's policy %d is %q, not %q: its rules changed; look again", guard, i, p.Name(), pname)
	}
	name := guard + "/" + p.Name()
	switch act {
	case "open", "close", "reset":
		f, ok := p.(forcer)
		if !ok {
			break
		}
		switch act {
		case "open":
			f.ForceOpen()
			return name + " forced open", nil
		case "close":
			f.ForceClose()
			return name + " forced closed", nil
		}
		f.Reset()
		return name + " reset", nil
	case "rate", "burst":
		t, ok := p.(retuner)
		if !ok {
			break
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n <= 0 {
			return "", fmt.Errorf("%s: want a positive whole number, not %q", act, value)
		}
		// Each reads the other number and writes both: two at once must
		// not undo one another.
		d.tuneMu.Lock()
		defer d.tuneMu.Unlock()
		if act == "rate" {
			err = t.SetLimit(ratelimit.PerSecond(n), t.Burst())
		} else {
			err = t.SetLimit(t.Rate(), n)
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s set to %d", name, act, n), nil
	case "shadow", "enforce":
		// By name, as SetShadow goes: every policy of the chain so named.
		if act == "enforce" && w.g.Stats().Shadowed {
			return "", fmt.Errorf("guard %q is in shadow mode as a whole: enforce the guard", guard)
		}
		if err := w.g.SetShadow(p.Name(), act == "shadow"); err != nil {
			return "", err
		}
		if act == "shadow" {
			return name + " in shadow mode: it rejects nothing, and counts what it would", nil
		}
		return name + " enforcing", nil
	}
	return "", fmt.Errorf("%s takes no action %q", name, act)
}
