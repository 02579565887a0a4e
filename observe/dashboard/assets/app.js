// The sluice dashboard's page: it draws each snapshot the server streams
// at api/events and posts admin actions to api/action.
'use strict';
(function () {
  const token = document.body.dataset.token;
  const actionsOn = document.body.dataset.actions === 'true';
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  const sum = (o) => Object.values(o || {}).reduce((a, b) => a + b, 0);
  const fmt = (n) => n.toLocaleString('en-US');

  // Charts: one polyline per series over 60 points.
  const W = 640, H = 170, L = 44, R = 8, T = 8, B = 20;
  function chart(node, series, unit) {
    let top = 0;
    for (const s of series) for (const v of s.values) top = Math.max(top, v);
    top = top > 0 ? niceCeil(top) : 1;
    const n = series.length ? series[0].values.length : 60;
    const x = (i) => L + (W - L - R) * (n > 1 ? i / (n - 1) : 0);
    const y = (v) => T + (H - T - B) * (1 - v / top);
    node.replaceChildren();
    for (const f of [0, 0.5, 1]) {
      node.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(top * f), y2: y(top * f) }));
      const t = svg('text', { x: L - 6, y: y(top * f) + 4, 'text-anchor': 'end' });
      t.textContent = fmt(+(top * f).toPrecision(3)) + unit;
      node.append(t);
    }
    for (const [label, at] of [['-60 s', L], ['now', W - R]]) {
      const t = svg('text', { x: at, y: H - 4, 'text-anchor': at === L ? 'start' : 'end' });
      t.textContent = label;
      node.append(t);
    }
    for (const s of series) {
      const d = s.values.map((v, i) => (i ? 'L' : 'M') + x(i).toFixed(1) + ' ' + y(v).toFixed(1)).join(' ');
      node.append(svg('path', { class: s.name, d: d, 'data-series': s.name }));
    }
  }
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function drawCharts(c) {
    const calls = [{ name: 'admitted', values: c.admitted }];
    for (const [cause, values] of Object.entries(c.rejected || {})) calls.push({ name: cause, values: values });
    if (c.shadow) calls.push({ name: 'shadow', values: c.shadow });
    chart($('calls'), calls, '');
    $('calls-legend').replaceChildren(...calls.flatMap((s) => [el('i', { class: 'k ' + s.name }), s.name + ' ']));
    chart($('latency'), [{ name: 'p50', values: c.p50 }, { name: 'p99', values: c.p99 }], '');
  }

  // Guards: the tables are built when the set of guards and policies
  // changes, and their cells updated in place otherwise, so an input being
  // typed in survives the next snapshot.
  let shape = '';
  // The cells to update, by a key no name can forge: a Guard named
  // "switch" is not a switch.
  let cells = {};

  function policyCells(p) {
    const figures = (p.details || []).map((d) => d.name + ' ' + d.value);
    if (p.shadowRejected) figures.push('would have rejected ' + fmt(p.shadowRejected) + ' in shadow mode');
    const details = figures.join(' · ');
    const keys = (p.topKeys || []).map((k) => k.key + ' ' + fmt(k.rejected)).join(', ');
    return {
      state: (p.state || '') + (p.shadowed ? (p.state ? ' · ' : '') + 'shadow mode' : ''),
      admitted: fmt(p.admitted),
      rejected: fmt(sum(p.rejected)),
      inflight: fmt(p.inflight),
      details: details,
      keys: keys ? 'top rejected: ' + keys : '',
    };
  }
  function guardSummary(g) {
    return 'admitted ' + fmt(g.admitted) + ' · rejected ' + fmt(sum(g.rejected)) + ' · fallbacks ' + fmt(g.fallbacks) +
      (g.retries || g.budgetRefusals ? ' · retries ' + fmt(g.retries || 0) + ' · refused by the budget ' + fmt(g.budgetRefusals || 0) : '') +
      (g.shadowed ? ' · shadow mode' : '');
  }

  function actionCell(g, i, p) {
    const td = el('td');
    if (!actionsOn) return td;
    for (const a of p.actions || []) {
      if (a === 'rate' || a === 'burst') {
        const input = el('input', { class: 'num', type: 'number', min: '1', step: '1', placeholder: a + (a === 'rate' ? '/s' : ''),
          'data-input': a, 'data-guard': g.name, 'data-policy': String(i) });
        const b = el('button', { type: 'button', 'data-action': a, 'data-guard': g.name, 'data-policy': String(i) }, 'set ' + a);
        b.addEventListener('click', () => act({ guard: g.name, policy: String(i), name: p.name, action: a, value: input.value }));
        td.append(input, b);
        continue;
      }
      const label = { open: 'force open', close: 'force close', shadow: 'shadow mode', enforce: 'enforce' }[a] || a;
      const b = el('button', { type: 'button', 'data-action': a, 'data-guard': g.name, 'data-policy': String(i) }, label);
      b.addEventListener('click', () => act({ guard: g.name, policy: String(i), name: p.name, action: a }));
      td.append(b);
    }
    return td;
  }

  // guardActions returns the buttons of the actions on a Guard as a whole.
  function guardActions(g) {
    const span = el('span', { class: 'guard-actions' });
    if (!actionsOn) return span;
    for (const a of g.actions || []) {
      const label = { shadow: 'guard in shadow mode', enforce: 'enforce guard' }[a] || a;
      const b = el('button', { type: 'button', 'data-action': a, 'data-guard': g.name, 'data-policy': '' }, label);
      b.addEventListener('click', () => act({ guard: g.name, policy: '', action: a }));
      span.append(b);
    }
    return span;
  }

  function buildGuards(s) {
    cells = {};
    const root = $('guards');
    root.replaceChildren();
    if (!s.guards.length) root.append(el('p', { class: 'empty' }, 'No guard observed yet.'));
    s.guards.forEach((g) => {
      const summary = el('span', { class: 'sum' });
      cells[JSON.stringify(['guard', g.name])] = summary;
      const head = el('tr', {}, ...['policy', 'state', 'admitted', 'rejected', 'in flight', 'figures', actionsOn ? 'actions' : ''].map((h) => el('th', {}, h)));
      const rows = g.policies.map((p, i) => {
        const c = {};
        for (const f of ['state', 'admitted', 'rejected', 'inflight', 'details', 'keys']) c[f] = el('span', { 'data-f': f });
        cells[JSON.stringify(['policy', g.name, i])] = c;
        return el('tr', { 'data-guard': g.name, 'data-policy': String(i) },
          el('td', {}, p.name, el('br'), el('span', { class: 'kind' }, p.kind)),
          el('td', {}, c.state),
          el('td', { class: 'num' }, c.admitted),
          el('td', { class: 'num' }, c.rejected),
          el('td', { class: 'num' }, c.inflight),
          el('td', {}, c.details, el('br'), el('span', { class: 'keys' }, c.keys)),
          actionCell(g, i, p));
      });
      root.append(el('div', { class: 'guard', 'data-guard': g.name },
        el('h3', {}, g.name, summary, guardActions(g)), el('table', {}, el('thead', {}, head), el('tbody', {}, ...rows))));
    });
    const sw = $('switches');
    sw.replaceChildren();
    if ((s.switches || []).length) {
      const rows = s.switches.map((x) => {
        const st = el('span', { 'data-f': 'state' });
        cells[JSON.stringify(['switch', x.name])] = st;
        const td = el('td');
        if (actionsOn) {
          for (const a of ['on', 'off', 'auto']) {
            const b = el('button', { type: 'button', 'data-action': a, 'data-switch': x.name }, a === 'auto' ? 'unpin' : 'pin ' + a);
            b.addEventListener('click', () => act({ switch: x.name, action: a }));
            td.append(b);
          }
        }
        return el('tr', {}, el('td', {}, x.name), el('td', {}, st), td);
      });
      sw.append(el('div', { class: 'guard' }, el('h3', {}, 'Degradation switches'), el('table', {}, el('tbody', {}, ...rows))));
    }
  }

  function updateGuards(s) {
    for (const g of s.guards) {
      cells[JSON.stringify(['guard', g.name])].textContent = guardSummary(g);
      g.policies.forEach((p, i) => {
        const c = cells[JSON.stringify(['policy', g.name, i])];
        const v = policyCells(p);
        for (const [f, text] of Object.entries(v)) c[f].textContent = text;
        c.state.className = v.state ? 'state ' + v.state : '';
      });
    }
    for (const x of s.switches || []) {
      const st = cells[JSON.stringify(['switch', x.name])];
      const on = x.on ? 'on' : 'off';
      st.textContent = on + (x.pinned ? ' (pinned)' : '');
      st.className = 'state ' + on;
    }
  }

  function drawEvents(events) {
    $('events').replaceChildren(...(events.length ? events.map((e) => {
      const t = new Date(e.time);
      return el('li', { 'data-kind': e.kind },
        el('time', { datetime: e.time }, t.toLocaleTimeString('en-GB', { hour12: false })),
        el('span', { class: 'ev ' + e.kind }, e.kind),
        el('span', {}, [e.guard, e.policy].filter(Boolean).join(' / ')),
        el('span', {}, e.text + (e.times > 1 ? ' (×' + fmt(e.times) + ')' : '')));
    }) : [el('li', { class: 'empty' }, 'No event yet.')]));
  }

  function render(s) {
    const t0 = performance.now();
    const sig = JSON.stringify([s.guards.map((g) => [g.name, g.policies.map((p) => [p.name, p.actions])]),
      (s.switches || []).map((x) => x.name)]);
    if (sig !== shape) {
      shape = sig;
      buildGuards(s);
    }
    updateGuards(s);
    drawCharts(s.chart);
    drawEvents(s.events);
    $('rules').textContent = s.rules ? 'rules ' + s.rules.version + (s.rules.error ? ' · last reload failed: ' + s.rules.error : '') : '';
    $('admin').textContent = s.actions.enabled
      ? 'admin actions on · ' + s.actions.done + ' taken · ' + s.actions.refused + ' refused'
      : 'read-only';
    const st = $('status');
    st.textContent = 'live · ' + new Date(s.time).toLocaleTimeString('en-GB', { hour12: false });
    st.className = 'status live';
    // How long this snapshot took to draw, for whoever measures the page.
    document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
  }

  async function refresh() {
    const r = await fetch('api/state', { cache: 'no-store' });
    if (r.ok) render(await r.json());
  }

  async function act(fields) {
    const flash = $('flash');
    const body = new URLSearchParams(Object.assign({ token: token }, fields));
    let text, ok = false;
    try {
      const r = await fetch('api/action', { method: 'POST', body: body });
      const j = await r.json();
      ok = j.ok;
      text = j.text;
    } catch (e) {
      text = String(e);
    }
    flash.hidden = false;
    flash.textContent = text;
    flash.className = ok ? 'flash' : 'flash err';
    await refresh().catch(() => {});
  }

  const stream = new EventSource('api/events');
  stream.addEventListener('state', (e) => render(JSON.parse(e.data)));
  stream.onerror = () => {
    const st = $('status');
    st.textContent = 'reconnecting…';
    st.className = 'status down';
  };
})();
