// reclaim's dashboard: polls /v1/resources and /v1/resources/history once a
// second and draws the models, the ledger, the residue and the chart. The
// browser sends the key it was asked for (a login whose password is the key).
'use strict';

const POLL_MS = 1000;
const $ = (id) => document.getElementById(id);

function bytes(n, signed) {
  if (n === null || n === undefined) return '—';
  const sign = n < 0 ? '−' : signed && n > 0 ? '+' : '';
  let v = Math.abs(n);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
  return sign + (u === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[u];
}
function count(n, signed) { return (signed && n > 0 ? '+' : '') + (n < 0 ? '−' + -n : n); }
function duration(s) {
  s = Math.max(0, Math.floor(s));
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + String(s % 60).padStart(2, '0') + ' s';
  return Math.floor(s / 3600) + ' h ' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + ' min';
}
function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function sum(obj, skip) {
  let s = 0;
  for (const [k, v] of Object.entries(obj || {})) if (k !== skip) s += v;
  return s;
}

async function api(path, body) {
  const init = body === undefined ? {} : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) };
  const r = await fetch(path, init);
  const text = await r.text();
  let j = null;
  try { j = JSON.parse(text); } catch (e) { /* not JSON: the text is the error */ }
  if (!r.ok) throw new Error((j && j.error && (j.error.message || j.error)) || text || r.statusText);
  return j;
}

// --- models -----------------------------------------------------------------

const rows = new Map();  // model id -> its row's cells
const rowErrors = new Map();

function action(model, label, cls, run) {
  const b = el('button', cls, label);
  b.dataset.action = label.toLowerCase();
  b.addEventListener('click', async () => {
    b.disabled = true;
    rowErrors.delete(model);
    try { await run(); } catch (e) { rowErrors.set(model, e.message); }
    poll();
  });
  return b;
}

// A model's every field, as the server's table of them (model_fields in
// /v1/resources) names, reads and explains them: a figure added there shows
// here with no change to this page.
const openDetails = new Set();  // model ids whose details are shown

function fieldText(f, v, now) {
  if (v === undefined || v === null) return '—';
  switch (f.unit) {
    case 'bytes': return bytes(v);
    case 'flag': return v ? 'yes' : 'no';
    case 'unix_seconds': return 'in ' + duration(v - now);
    case 'unix_seconds_past': return duration(now - v) + ' ago';
    case 'milliseconds': return v < 1000 ? v.toFixed(0) + ' ms' : (v / 1000).toFixed(2) + ' s';
    case 'fraction': return Math.round(v * 100) + '%';
    case 'bytes_by_place': return Object.entries(v).map(([k, b]) => k + ' ' + bytes(b)).join(', ') || '—';
    default: return Array.isArray(v) ? v.join(', ') || '—' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  }
}

function drawDetails(c, m, fields, now) {
  c.details.hidden = !openDetails.has(m.id);
  c.toggle.textContent = c.details.hidden ? 'Details' : 'Hide';
  if (c.details.hidden) return;
  const dl = el('dl');
  for (const f of fields) {
    const v = f.group ? (m[f.group] || {})[f.key] : m[f.key];
    if (v === undefined && !f.always) continue;
    const dt = el('dt', '', f.group ? f.group + '.' + f.key : f.key);
    dt.title = f.help;
    const dd = el('dd', '', fieldText(f, v, now));
    dd.dataset.field = dt.textContent;
    dl.append(dt, dd);
  }
  c.detailsCell.replaceChildren(dl);
}

function modelRow(m) {
  const tr = el('tr');
  tr.dataset.model = m.id;
  const cells = {};
  for (const k of ['name', 'state', 'host', 'device', 'estimate', 'running', 'waiting', 'expires', 'actions']) {
    cells[k] = el('td', ['host', 'device', 'estimate', 'running', 'waiting'].includes(k) ? 'num' : k === 'actions' ? 'actions' : '');
    cells[k].dataset.col = k;
    tr.appendChild(cells[k]);
  }
  cells.load = action(m.id, 'Load', '', () => api('/v1/models/load', { model: m.id }));
  cells.pin = action(m.id, 'Pin', '', () => api('/v1/models/pin', { model: m.id, pin: !cells.pinned }));
  cells.unload = action(m.id, 'Unload', '', () => api('/v1/models/unload', { model: m.id, mode: 'drain' }));
  cells.cancel = action(m.id, 'Cancel', 'danger', () => api('/v1/models/unload', { model: m.id, mode: 'cancel' }));
  cells.cancel.title = 'Unload now, ending the requests that run';
  cells.unload.title = 'Unload once the requests that run are done';
  cells.toggle = el('button', '', 'Details');
  cells.toggle.dataset.action = 'details';
  cells.toggle.addEventListener('click', () => {
    if (!openDetails.delete(m.id)) openDetails.add(m.id);
    poll();
  });
  cells.actions.append(cells.load, cells.pin, cells.unload, cells.cancel, cells.toggle);
  cells.tr = tr;
  cells.details = el('tr', 'details');
  cells.details.dataset.detailsOf = m.id;
  cells.details.hidden = true;
  cells.detailsCell = el('td');
  cells.detailsCell.colSpan = 9;
  cells.details.appendChild(cells.detailsCell);
  return cells;
}

function drawModels(models, fields, now) {
  const body = $('models').tBodies[0];
  const seen = new Set();
  for (const m of models) {
    seen.add(m.id);
    let c = rows.get(m.id);
    if (!c) { c = modelRow(m); rows.set(m.id, c); }
    body.append(c.tr, c.details);  // keeps the server's order
    c.tr.dataset.state = m.state;
    c.pinned = m.pinned;
    c.name.innerHTML = '<span class="name">' + esc(m.id) + '</span>' + (m.pinned ? '<span class="pin">pinned</span>' : '') +
      (m.aliases && m.aliases.length ? '<div class="aliases">' + m.aliases.map(esc).join(', ') + '</div>' : '') +
      (rowErrors.has(m.id) ? '<div class="error">' + esc(rowErrors.get(m.id)) + '</div>' :
        m.last_error ? '<div class="error">' + esc(m.last_error) + '</div>' : '');
    const progress = m.state === 'loading' && m.load_progress !== undefined ? ' ' + Math.round(m.load_progress * 100) + '%' : '';
    c.state.innerHTML = '<span class="state ' + esc(m.state) + '">' + esc(m.state) + progress + '</span>' +
      // The state machine's finer state where it says more (draining,
      // reloading, closing, reload_due).
      (m.life && !['serving', 'loading', 'unloaded', 'unloading'].includes(m.life) ?
        ' <span class="aliases">' + esc(m.life.replace('_', ' ')) + '</span>' : '');
    const host = m.bytes_by_device && m.bytes_by_device.host !== undefined ? m.bytes_by_device.host : m.bytes;
    const device = sum(m.bytes_by_device, 'host');
    c.host.textContent = bytes(host);
    c.device.textContent = bytes(device);
    c.estimate.innerHTML = esc(m.estimate ? bytes(m.estimate) : '—') +
      (m.estimate ? '<div class="bar" title="held / estimate"><div style="width:' + Math.min(100, 100 * (m.bytes || 0) / m.estimate).toFixed(0) + '%"></div></div>' : '');
    c.running.textContent = m.in_flight;
    c.waiting.textContent = m.queued;
    c.expires.textContent = m.state === 'unloaded' ? '—' : m.pinned ? 'never (pinned)' :
      m.in_flight > 0 ? 'when idle' : m.expires_at ? duration(m.expires_at - now) : 'never';
    c.load.disabled = m.state !== 'unloaded';
    c.pin.textContent = m.pinned ? 'Unpin' : 'Pin';
    c.pin.dataset.action = m.pinned ? 'unpin' : 'pin';
    c.pin.disabled = false;
    c.unload.disabled = m.state === 'unloaded' || m.state === 'unloading';
    c.cancel.disabled = m.state === 'unloaded';
    drawDetails(c, m, fields, now);
  }
  for (const [id, c] of rows) if (!seen.has(id)) { c.tr.remove(); c.details.remove(); rows.delete(id); }
}

// --- ledger -----------------------------------------------------------------

const openState = new Map();  // owner path -> open, as the user left it

function ledgerTree(entries) {
  const root = { children: new Map(), entries: [], bytes: 0, count: 0, age: 0 };
  for (const e of entries) {
    const total = e.bytes + sum(e.device_bytes);
    let node = root;
    const parts = e.owner.split('/');
    let path = '';
    for (const p of parts) {
      path = path ? path + '/' + p : p;
      if (!node.children.has(p)) node.children.set(p, { name: p, path, children: new Map(), entries: [], bytes: 0, count: 0, age: 0 });
      node = node.children.get(p);
      node.bytes += total;
      node.count += 1;
      node.age = Math.max(node.age, e.age_ms);
    }
    node.entries.push(e);
  }
  return root;
}

function drawNode(node, depth) {
  const open = openState.has(node.path) ? openState.get(node.path) : depth === 0 || node.name.startsWith('model:');
  let h = '<details data-path="' + esc(node.path) + '"' + (open ? ' open' : '') + '><summary>' +
    '<span class="owner">' + esc(node.name) + '</span><span class="kind">' + node.count + (node.count === 1 ? ' entry' : ' entries') +
    '</span><span class="bytes">' + bytes(node.bytes) + '</span><span class="age">' + duration(node.age / 1000) + '</span></summary>';
  const kids = [...node.children.values()].sort((a, b) => b.bytes - a.bytes || a.name.localeCompare(b.name));
  for (const k of kids) h += drawNode(k, depth + 1);
  for (const e of node.entries.slice().sort((a, b) => b.bytes - a.bytes)) {
    const dev = Object.entries(e.device_bytes || {}).map(([d, b]) => d + ' ' + bytes(b)).join(', ');
    h += '<div class="row" data-entry="' + e.id + '"><span class="label" title="' + esc(e.label) + '">' + esc(e.label) +
      (dev ? ' <span class="kind">(' + esc(dev) + ')</span>' : '') + '</span><span class="kind">' + esc(e.kind) +
      '</span><span class="bytes">' + bytes(e.bytes + sum(e.device_bytes)) + '</span><span class="age">' + duration(e.age_ms / 1000) + '</span></div>';
  }
  return h + '</details>';
}

function drawLedger(ledger) {
  const tree = ledgerTree(ledger.entries);
  const kids = [...tree.children.values()].sort((a, b) => b.bytes - a.bytes || a.name.localeCompare(b.name));
  $('ledger').innerHTML = kids.map((k) => drawNode(k, 0)).join('') ||
    '<div class="row">The ledger is empty.</div>';
}
$('ledger').addEventListener('toggle', (ev) => {
  const d = ev.target;
  if (d.dataset && d.dataset.path !== undefined) openState.set(d.dataset.path, d.open);
}, true);

// --- residue ----------------------------------------------------------------

const RESIDUE = [
  ['anon', 'anon memory', true], ['swap', 'swapped out', true], ['rss', 'resident (RSS)', true],
  ['locked', 'locked pages', true], ['device_used', 'device memory', true], ['threads', 'threads', false],
  ['fds', 'file descriptors', false], ['maps', 'memory maps', false], ['model_maps', 'model file maps', false],
];

function drawResidue(r) {
  const v = r.residue_verdict;
  const over = new Map(v.checks.filter((c) => !c.ok).map((c) => [c.figure, c]));
  const body = $('residue').tBodies[0];
  body.innerHTML = '';
  for (const [key, name, isBytes] of RESIDUE) {
    const tr = el('tr');
    tr.dataset.figure = key;
    const figure = key === 'device_used' ? 'device' : key === 'anon' || key === 'swap' ? 'anon+swap' : key;
    if (v.verdict === 'over' && over.has(figure)) tr.className = 'bad';
    tr.append(el('td', '', name), el('td', 'num', isBytes ? bytes(r.residue[key], true) : count(r.residue[key], true)),
      el('td', 'num hint', 'now ' + (isBytes ? bytes(r.usage[key]) : r.usage[key])));
    body.appendChild(tr);
  }
  const note = $('residue-note');
  const top = $('verdict');
  note.className = 'residue-note ' + v.verdict;
  top.className = 'verdict ' + v.verdict;
  top.dataset.verdict = v.verdict;
  if (v.verdict === 'clean') {
    note.textContent = 'Everything is given back: every figure is within the audit\'s thresholds (anon+swap ≤ ' +
      bytes(v.checks[0].limit) + '; no locked pages, threads, descriptors, maps or device memory beyond the start).';
    top.textContent = '✓ all given back';
  } else if (v.verdict === 'over') {
    const what = [...over.values()].map((c) => c.figure + ' ' + (c.figure === 'anon+swap' || c.figure === 'locked' || c.figure === 'device' ?
      bytes(c.value, true) : count(c.value, true)) + ' (limit ' + c.limit + ')');
    note.textContent = 'Not given back: ' + what.join(', ') + '. Nothing is loaded, yet the process holds more than when it started.';
    top.textContent = '✗ residue: ' + [...over.keys()].join(', ');
  } else {
    const held = v.models_loaded + (v.models_loaded === 1 ? ' model' : ' models') + ' loaded, ' + bytes(Math.max(0, v.held_bytes)) +
      ' in ' + Math.max(0, v.held_entries) + ' more ledger entries than at start';
    note.textContent = 'Holding: ' + held + '. That memory is accounted for on the ledger; the residue is judged once it is given back.';
    top.textContent = 'holding ' + bytes(Math.max(0, v.held_bytes));
  }
}

function drawTotals(r) {
  const budget = r.memory_budget > 0 ? ' of ' + bytes(r.memory_budget) : '';
  $('totals').innerHTML =
    '<span>RSS <b>' + bytes(r.usage.rss) + '</b></span>' +
    '<span>anon <b>' + bytes(r.usage.anon + r.usage.swap) + '</b></span>' +
    '<span>device <b>' + bytes(r.usage.device_used) + '</b></span>' +
    '<span>ledger <b>' + bytes(r.ledger.bytes) + '</b> in ' + r.ledger.count + ' entries</span>' +
    '<span>models <b>' + bytes(r.accounted) + '</b>' + esc(budget) + '</span>' + deviceState(r.devices);
}

// The accelerator's runtime state: in use, idle (released after a while) or
// released; nothing where there is no accelerator.
function deviceState(d) {
  if (!d || d.state === 'none') return '';
  const words = { in_use: 'in use', idle: 'idle', released: 'released' };
  const after = d.state === 'idle' && d.release_after_s !== null ?
    ' (released after ' + duration(d.release_after_s) + ' idle)' : '';
  return '<span id="device-state" data-state="' + esc(d.state) + '">' + esc(d.names) + ' <b>' + esc(words[d.state] || d.state) +
    '</b>' + esc(after) + '</span>';
}

// --- chart ------------------------------------------------------------------

const BINARY_STEPS = [];
for (let v = 1024; v <= 2 ** 50; v *= 2) BINARY_STEPS.push(v, v * 1.5);

const hist = { t: [], rss: [], anon: [], device: [], ledger_host: [], ledger_device: [], events: [], last: 0, capacity: 600 };
let chart = null;

function markers(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.font = (11 * devicePixelRatio) + 'px system-ui, sans-serif';
  for (const e of hist.events) {
    const x = Math.round(u.valToPos(e.t, 'x', true));
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
    const color = e.event === 'load' ? '#1f8a4c' : '#c0392b';
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.fillText((e.event === 'load' ? '▲ ' : '▼ ') + e.model, x + 3 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
  }
  ctx.restore();
}

function makeChart() {
  const box = $('chart');
  const fmt = (u, vals) => vals.map((v) => bytes(v));
  chart = new uPlot({
    width: box.clientWidth || 800,
    height: 300,
    // At least a minute across, so that a fresh server's few samples read in
    // seconds, not milliseconds.
    scales: { x: { time: true, range: (u, min, max) => [Math.min(min, max - 60), max] }, y: { range: (u, min, max) => [0, Math.max(max * 1.1, 1 << 20)] } },
    // Ticks at powers of two, so that the axis reads 512 MiB, not 536.9 MB.
    axes: [{}, { values: fmt, size: 80, incrs: BINARY_STEPS }],
    series: [
      {},
      { label: 'RSS', points: { show: false }, stroke: '#2b6cb0', width: 2, value: (u, v) => bytes(v) },
      { label: 'anon+swap', points: { show: false }, stroke: '#805ad5', width: 2, value: (u, v) => bytes(v) },
      { label: 'device', points: { show: false }, stroke: '#dd6b20', width: 2, value: (u, v) => bytes(v) },
      { label: 'ledger (host)', points: { show: false }, stroke: '#1f8a4c', width: 2, dash: [6, 4], value: (u, v) => bytes(v) },
      { label: 'ledger (device)', points: { show: false }, stroke: '#b7791f', width: 2, dash: [6, 4], value: (u, v) => bytes(v) },
    ],
    hooks: { draw: [markers] },
    cursor: { points: { show: false } },
  }, [[], [], [], [], [], []], box);
  window.addEventListener('resize', () => chart.setSize({ width: box.clientWidth, height: 300 }));
}

function addHistory(h) {
  hist.capacity = h.capacity || hist.capacity;
  $('window').textContent = Math.round(hist.capacity * (h.every_ms || 1000) / 60000);
  for (const k of ['t', 'rss', 'anon', 'device', 'ledger_host', 'ledger_device']) {
    hist[k].push(...h[k]);
    if (hist[k].length > hist.capacity) hist[k].splice(0, hist[k].length - hist.capacity);
  }
  hist.events.push(...h.events);
  const oldest = hist.t.length ? hist.t[0] : 0;
  hist.events = hist.events.filter((e) => e.t >= oldest);
  if (hist.t.length) hist.last = hist.t[hist.t.length - 1];
  if (!chart) makeChart();
  chart.setData([hist.t, hist.rss, hist.anon, hist.device, hist.ledger_host, hist.ledger_device]);
}

// --- polling ----------------------------------------------------------------

let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    const [r, h] = await Promise.all([api('/v1/resources'), api('/v1/resources/history?since=' + hist.last)]);
    $('offline').hidden = true;
    const now = Date.now() / 1000;
    drawTotals(r);
    drawModels(r.models, r.model_fields, now);
    drawLedger(r.ledger);
    drawResidue(r);
    addHistory(h);
    document.body.dataset.updated = String(now);
  } catch (e) {
    const box = $('offline');
    box.hidden = false;
    box.textContent = 'Cannot read the server: ' + e.message + ' (retrying every second)';
  } finally {
    polling = false;
  }
}

poll();
setInterval(poll, POLL_MS);
