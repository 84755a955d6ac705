// outboxd console: keyboard shortcuts, live overview charts, dead-letter and
// replay actions run as tracked jobs. No dependencies; served under a CSP
// without inline script or style.
'use strict';

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const table = document.querySelector('meta[name="table"]').content;
const api = '/api/v1/tables/' + encodeURIComponent(table);

async function call(method, url, body) {
  const opts = { method, headers: { 'Accept': 'application/json' }, credentials: 'same-origin' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.headers['X-CSRF-Token'] = csrf;
    opts.body = JSON.stringify(body);
  } else if (method !== 'GET') {
    opts.headers['X-CSRF-Token'] = csrf;
  }
  const res = await fetch(url, opts);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((data.error && data.error.message) || res.statusText);
  return data;
}

const fmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });

// ---- keyboard ----
function rows() { return Array.from(document.querySelectorAll('#rows tbody tr[data-href]')); }
let cursor = -1;
function moveCursor(d) {
  const rs = rows();
  if (!rs.length) return;
  if (cursor >= 0 && rs[cursor]) rs[cursor].classList.remove('cursor');
  cursor = Math.max(0, Math.min(rs.length - 1, cursor + d));
  rs[cursor].classList.add('cursor');
  rs[cursor].scrollIntoView({ block: 'nearest' });
}
let pendingG = false;
document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (t.matches && t.matches('input, textarea, select')) {
    if (e.key === 'Escape') t.blur();
    return;
  }
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const base = '/t/' + encodeURIComponent(table);
  if (pendingG) {
    pendingG = false;
    const dest = { o: '/', m: '/messages', d: '/dead', r: '/replay', a: '/audit' }[e.key];
    if (dest) location.href = base + dest;
    return;
  }
  switch (e.key) {
    case 'g': pendingG = true; setTimeout(() => { pendingG = false; }, 1200); break;
    case '/': { const f = document.getElementById('filter-first'); if (f) { e.preventDefault(); f.focus(); } break; }
    case 'j': moveCursor(1); break;
    case 'k': moveCursor(-1); break;
    case 'Enter': { const r = rows()[cursor]; if (r) location.href = r.dataset.href; break; }
    case 'x': { const r = rows()[cursor]; const c = r && r.querySelector('input.sel'); if (c) { c.checked = !c.checked; c.dispatchEvent(new Event('change', { bubbles: true })); } break; }
    case 'n': { const a = document.getElementById('next-page') || document.getElementById('search-further'); if (a) location.href = a.href; break; }
    case 'p': { if (document.getElementById('first-page')) history.back(); break; }
    case '?': document.getElementById('help').showModal(); break;
  }
});
const sw = document.getElementById('table-switch');
if (sw) sw.addEventListener('change', () => { location.href = '/t/' + encodeURIComponent(sw.value) + '/'; });
document.querySelectorAll('#rows tbody tr[data-href]').forEach((r) => {
  r.addEventListener('dblclick', () => { location.href = r.dataset.href; });
});

// ---- charts: hand-drawn SVG from the sampler's series ----
const SVG = 'http://www.w3.org/2000/svg';
function el(name, attrs, text) {
  const n = document.createElementNS(SVG, name);
  for (const k in attrs) n.setAttribute(k, attrs[k]);
  if (text !== undefined) n.textContent = text;
  return n;
}
function draw(box, samples, key) {
  const w = box.clientWidth || 320, h = box.clientHeight || 140, padL = 42, padB = 16, padT = 6;
  const pts = samples.filter((s) => s[key] !== null && s[key] !== undefined).map((s) => [Date.parse(s.at), s[key]]);
  const svg = el('svg', { viewBox: `0 0 ${w} ${h}`, role: 'img', 'aria-label': key });
  if (pts.length < 2) {
    svg.appendChild(el('text', { x: w / 2, y: h / 2, 'text-anchor': 'middle', class: 'empty' }, 'collecting samples…'));
    box.replaceChildren(svg);
    return;
  }
  const t0 = pts[0][0], t1 = pts[pts.length - 1][0];
  const vmax = Math.max(1, ...pts.map((p) => p[1])) * 1.1;
  const x = (t) => padL + (w - padL - 4) * (t - t0) / Math.max(1, t1 - t0);
  const y = (v) => padT + (h - padT - padB) * (1 - v / vmax);
  for (const f of [0, 0.5, 1]) {
    const v = vmax * f;
    svg.appendChild(el('line', { x1: padL, x2: w - 4, y1: y(v), y2: y(v), class: 'grid' }));
    svg.appendChild(el('text', { x: padL - 4, y: y(v) + 3, 'text-anchor': 'end' }, fmt.format(v)));
  }
  const line = pts.map((p, i) => (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
  svg.appendChild(el('path', { d: `${line} L${x(t1).toFixed(1)} ${y(0)} L${x(t0).toFixed(1)} ${y(0)} Z`, class: 'area' }));
  svg.appendChild(el('path', { d: line, class: 'line' }));
  const label = (t) => isoTime(new Date(t));
  svg.appendChild(el('text', { x: padL, y: h - 3 }, label(t0)));
  svg.appendChild(el('text', { x: w - 4, y: h - 3, 'text-anchor': 'end' }, label(t1)));
  const last = pts[pts.length - 1][1];
  svg.appendChild(el('text', { x: w - 6, y: padT + 10, 'text-anchor': 'end' }, 'now ' + fmt.format(last)));
  box.replaceChildren(svg);
}
// Times are shown in one format everywhere: UTC, ISO 8601 (the server
// renders dates as <time datetime=...>); the reader's local time is the
// title, shown on hover.
function isoTime(d) { return d.toISOString().slice(11, 19) + 'Z'; }
function localTitles(root) {
  root.querySelectorAll('time[datetime]').forEach((n) => {
    const d = new Date(n.getAttribute('datetime'));
    if (!Number.isNaN(d.getTime())) n.title = d.toLocaleString() + ' (local)';
  });
}
localTitles(document);
function ageText(s) {
  if (!s || s <= 0) return '—';
  if (s < 1) return Math.round(s * 1000) + 'ms';
  if (s < 60) return s.toFixed(1) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
}
async function refreshOverview() {
  try {
    const [samples, o] = await Promise.all([call('GET', api + '/samples'), call('GET', api + '/overview')]);
    document.querySelectorAll('.plot[data-series]').forEach((box) => draw(box, samples.samples, box.dataset.series));
    const set = (k, v) => { const n = document.querySelector(`[data-gauge="${k}"]`); if (n) n.textContent = v; };
    set('pending', fmt.format(o.pending)); set('processing', fmt.format(o.processing));
    set('dead', fmt.format(o.dead)); set('done', fmt.format(o.done_estimate));
    set('oldest', ageText(o.oldest_undelivered_age_seconds)); set('expired', fmt.format(o.expired_leases));
    const at = document.getElementById('sampled-at');
    if (at) { const now = new Date(); at.textContent = 'updated ' + isoTime(now); at.title = now.toLocaleString(); }
  } catch (err) {
    const at = document.getElementById('sampled-at');
    if (at) at.textContent = 'update failed: ' + err.message;
  }
}
if (document.body.dataset.page === 'overview') {
  refreshOverview();
  setInterval(refreshOverview, 5000);
}

// ---- pretty JSON payload ----
const payload = document.getElementById('payload');
if (payload) {
  try { payload.textContent = JSON.stringify(JSON.parse(payload.textContent), null, 2); } catch (_) { /* shown as stored */ }
}

// ---- filters from the current URL, as the API's filter object ----
// The page's own parameters and the form's empty fields are left out: the
// API refuses anything that is not a filter term with a value.
const pageKeys = ['after', 'limit', 'order', 'exact'];
function currentFilter() {
  const q = new URLSearchParams(location.search);
  const f = {};
  for (const [k, v] of q) {
    if (pageKeys.includes(k) || v === '') continue;
    if (f[k] === undefined) f[k] = v;
    else f[k] = [].concat(f[k], v);
  }
  return f;
}
// matchesAll: the filter names no term but status, so a write needs "all".
function matchesAll(f) { return Object.keys(f).every((k) => k === 'status'); }
// writeBody is the write a preview was shown for: pinned to its bound.
function writeBody(f, preview) {
  const body = { filter: f, bound: preview.bound };
  if (matchesAll(f)) body.all = true;
  return body;
}

// howMany is a preview's count as the confirmation says it: "10,000+" when
// capped, "at least N (among the newest M searched)" when partial.
function howMany(p) {
  if (p.partial) return `all matching (at least ${fmt.format(p.count)} among the newest ${fmt.format(p.searched)} searched)`;
  return fmt.format(p.count) + (p.capped ? '+' : '');
}

// ---- jobs ----
const jobBox = document.getElementById('job-status');
let liveCount = null;
async function refreshCount() {
  const node = document.getElementById('match-count');
  if (!node) return;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(currentFilter())) [].concat(v).forEach((x) => q.append(k, x));
  if (document.body.dataset.page === 'dead') q.set('status', 'dead');
  try {
    const c = await call('GET', api + '/count?' + q.toString());
    node.textContent = fmt.format(c.n) + (c.capped ? '+' : '');
    node.dataset.n = c.n;
  } catch (_) { /* keep the last figure */ }
}
function watchJob(job, onDone) {
  jobBox.classList.remove('hidden');
  const bar = document.getElementById('job-progress'), text = document.getElementById('job-text');
  const cancel = document.getElementById('job-cancel');
  cancel.disabled = false;
  cancel.onclick = async () => { cancel.disabled = true; try { await call('POST', '/api/v1/jobs/' + job.id + '/cancel'); } catch (e) { text.textContent = e.message; } };
  const tick = async () => {
    try { job = await call('GET', '/api/v1/jobs/' + job.id); } catch (e) { text.textContent = e.message; return; }
    bar.max = Math.max(1, job.total); bar.value = job.done;
    text.textContent = `job ${job.id} ${job.kind}: ${fmt.format(job.done)} of ${fmt.format(job.total)} — ${job.state}` + (job.error ? ': ' + job.error : '');
    jobBox.dataset.state = job.state;
    refreshCount();
    if (job.state === 'running') { setTimeout(tick, 500); return; }
    cancel.disabled = true;
    if (onDone) onDone(job);
  };
  tick();
}
// skipWarning is what a skip's confirmation says, in red, before anything.
const skipWarning = 'Skipped messages are never delivered: the receiver will not see them, and an ordered aggregate moves on without them.';
function confirmDialog(title, text, warning) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const w = document.getElementById('confirm-warning');
  if (w) { w.textContent = warning || ''; w.hidden = !warning; }
  return new Promise((resolve) => {
    document.getElementById('confirm-ok').onclick = () => { d.close(); resolve(true); };
    document.getElementById('confirm-cancel').onclick = () => { d.close(); resolve(false); };
    d.addEventListener('cancel', () => resolve(false), { once: true });
    d.showModal();
    document.getElementById('confirm-ok').focus();
  });
}

// ---- dead letters ----
function selected() { return Array.from(document.querySelectorAll('input.sel:checked')).map((c) => Number(c.value)); }
function updateSelection() {
  const n = selected().length;
  const label = document.getElementById('selected-count');
  if (label) label.textContent = n + ' selected';
  document.querySelectorAll('button[data-scope="selected"]').forEach((b) => { b.disabled = n === 0; });
}
document.addEventListener('change', (e) => {
  if (e.target.id === 'select-all') document.querySelectorAll('input.sel').forEach((c) => { c.checked = e.target.checked; });
  if (e.target.id === 'select-all' || e.target.classList.contains('sel')) updateSelection();
});
document.querySelectorAll('button[data-action]').forEach((b) => b.addEventListener('click', () => deadAction(b)));
async function deadAction(b) {
  const action = b.dataset.action, scope = b.dataset.scope, verb = action === 'retry' ? 'Retry' : 'Skip';
  const url = api + '/dead/' + action;
  const result = document.getElementById('action-result');
  try {
    if (scope === 'one' || scope === 'selected') {
      const ids = scope === 'one' ? [Number(b.dataset.id)] : selected();
      if (!await confirmOrSkip(scope, `${verb} ${ids.length} dead message(s)?`, action === 'skip' ? skipWarning : '')) return;
      const r = await call('POST', url, { ids });
      if (result) result.textContent = `${verb}: ${fmt.format(r.count)} moved.`;
      setTimeout(() => location.reload(), scope === 'one' ? 600 : 0);
      return;
    }
    const f = currentFilter();
    const preview = await call('POST', url, { filter: f, dry_run: true });
    const what = matchesAll(f) ? `every dead message (${howMany(preview)})` : `${howMany(preview)} dead message(s) matching this filter`;
    if (!await confirmDialog(`${verb} all matching`, `${verb} ${what}?`, action === 'skip' ? skipWarning : '')) return;
    const r = await call('POST', url, writeBody(f, preview));
    watchJob(r.job, () => setTimeout(() => location.reload(), 800));
  } catch (e) {
    alertBox(e.message);
  }
}
async function confirmOrSkip(scope, text, warning) {
  if (!document.getElementById('confirm')) return window.confirm(warning ? `${text}\n\n${warning}` : text);
  return confirmDialog('Confirm', text, warning);
}
function alertBox(msg) {
  let n = document.getElementById('action-error');
  if (!n) {
    n = document.createElement('p');
    n.id = 'action-error'; n.className = 'error'; n.setAttribute('role', 'alert');
    document.querySelector('main').prepend(n);
  }
  n.textContent = msg;
}

// ---- replay ----
const replayForm = document.getElementById('replay-form');
if (replayForm) replayForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const name = document.getElementById('replay-name').value.trim();
  const rate = Number(document.getElementById('replay-rate').value || 0);
  try {
    const f = currentFilter();
    const preview = await call('POST', api + '/replay', { name, rate, filter: f, dry_run: true });
    const pace = rate > 0 ? ` at ${fmt.format(rate)}/s` : ' as fast as possible';
    const what = matchesAll(f) ? `every done message (${howMany(preview)})` : `${howMany(preview)} done message(s)`;
    if (!await confirmDialog('Confirm replay', `Replay ${what} as "${name}"${pace}?`)) return;
    const r = await call('POST', api + '/replay', Object.assign({ name, rate }, writeBody(f, preview)));
    watchJob(r.job);
  } catch (err) {
    alertBox(err.message);
  }
});

// ---- retry now ----
// A message waiting for a later attempt made due now (audited).
const retryNow = document.getElementById('retry-now');
if (retryNow) retryNow.addEventListener('click', async () => {
  const result = document.getElementById('action-result');
  try {
    await call('POST', api + '/messages/' + encodeURIComponent(retryNow.dataset.id) + '/retry-now');
    if (result) result.textContent = 'Due now: the next dispatcher to look delivers it.';
    setTimeout(() => location.reload(), 600);
  } catch (e) {
    alertBox(e.message);
  }
});

// ---- pause and resume ----
// A route (or, with no name, the whole table) paused on every dispatcher
// until resumed; both audited.
function pauseURL(route, verb) {
  return route ? api + '/routes/' + encodeURIComponent(route) + '/' + verb : api + '/' + verb;
}
const pauseForm = document.getElementById('pause-form');
if (pauseForm) pauseForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const route = document.getElementById('pause-route').value.trim();
  const reason = document.getElementById('pause-reason').value.trim();
  const what = route ? `route "${route}"` : 'the whole table (nothing is delivered)';
  if (!await confirmDialog('Pause', `Pause ${what} on every dispatcher until it is resumed?`)) return;
  try {
    await call('POST', pauseURL(route, 'pause'), { reason });
    location.reload();
  } catch (err) {
    alertBox(err.message);
  }
});
document.querySelectorAll('button.resume').forEach((b) => b.addEventListener('click', async () => {
  try {
    await call('POST', pauseURL(b.dataset.route, 'resume'));
    location.reload();
  } catch (err) {
    alertBox(err.message);
  }
}));
