// kiln dashboard: a single page over kilnd's JSON API, plain JavaScript (no
// framework, nothing from the network). Routes live in the URL's hash:
//   #/jobs?filter=F     the job list (the API's filter and paging)
//   #/jobs/JOB          one job: spec, replicas, metrics chart, trials, logs
//   #/queue             QUEUED jobs in queue order
//   #/nodes             nodes, their accelerators and who holds them
//   #/notebooks         notebook instances: state, GPUs, a link to JupyterLab
// Every page polls while it is shown ("live"), and every value from the API is
// put into the page as text (textContent), never as HTML.
'use strict';

const POLL_MS = 1500;
const store = window.sessionStorage;
let timers = [];
let generation = 0; // bumped on each navigation: stale responses are dropped

// ---------- small helpers ----------

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function $(id) { return document.getElementById(id); }

function project() { return store.getItem('kiln.project') || 'default'; }

function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit',
    second: '2-digit' });
}

function fmtDuration(job) {
  if (!job.startTime) return '';
  const end = job.endTime ? new Date(job.endTime) : new Date();
  let s = Math.max(0, Math.round((end - new Date(job.startTime)) / 1000));
  const hh = Math.floor(s / 3600), mm = Math.floor((s % 3600) / 60);
  s %= 60;
  return hh ? `${hh}h ${mm}m` : mm ? `${mm}m ${s}s` : `${s}s`;
}

function stateBadge(s) { return h('span', { class: 'state ' + (s || ''), 'data-state': s }, s || '?'); }

function num(v, digits) {
  if (v === undefined || v === null || v === '') return '';
  const n = Number(v);
  return Number.isFinite(n) ? n.toFixed(digits) : String(v);
}

// Accelerators a job holds (from its replicas) or asks for (from its spec).
function accelerators(job) {
  const reps = (job.kilnStatus && job.kilnStatus.replicas) || [];
  const held = reps.reduce((n, r) => n + ((r.gpus || []).length), 0);
  const ti = job.trainingInput || {};
  const want = {};
  const add = (cfg, count) => {
    const a = cfg && cfg.acceleratorConfig;
    if (!a || !a.type || !count) return;
    want[a.type] = (want[a.type] || 0) + Number(a.count || 0) * count;
  };
  add(ti.masterConfig, 1);
  add(ti.workerConfig, Number(ti.workerCount || 0));
  add(ti.parameterServerConfig, Number(ti.parameterServerCount || 0));
  add(ti.evaluatorConfig, Number(ti.evaluatorCount || 0));
  const s = Object.entries(want).map(([t, n]) => `${n} × ${t}`).join(', ');
  if (held && reps.some((r) => r.state === 'RUNNING')) return s ? `${s} (held)` : `${held} held`;
  return s;
}

// ---------- the API ----------

class AuthError extends Error {}

async function api(path, opts) {
  const headers = { Accept: 'application/json' };
  const tok = store.getItem('kiln.token');
  if (tok) headers.Authorization = 'Bearer ' + tok;
  const o = Object.assign({ headers, cache: 'no-store' }, opts || {});
  if (o.body) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, o);
  if (r.status === 401) throw new AuthError(tok ? 'The token was refused.' : 'This kilnd needs a token.');
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const msg = (body.error && body.error.message) || r.statusText;
    throw new Error(`${r.status}: ${msg}`);
  }
  return body;
}

function jobsPath(rest) {
  return `/v1/projects/${encodeURIComponent(project())}/jobs${rest || ''}`;
}

function showError(e) {
  if (e instanceof AuthError) return showLogin(e.message);
  const st = $('status');
  st.textContent = String(e.message || e);
  st.hidden = false;
}

function clearError() { $('status').hidden = true; }

// Runs fn now and every `ms` while this page is shown.
function poll(fn, ms) {
  const gen = generation;
  const tick = async () => {
    if (gen !== generation) return;
    try {
      await fn(gen);
      if (gen === generation) clearError();
    } catch (e) {
      if (gen === generation) showError(e);
      if (e instanceof AuthError) return;
    }
    if (gen === generation) timers.push(setTimeout(tick, ms));
  };
  tick();
}

// ---------- login ----------

function showLogin(msg) {
  generation++;
  timers.forEach(clearTimeout);
  timers = [];
  $('page').replaceChildren();
  $('status').hidden = true;
  // a refused token is forgotten: the header must not say "signed in"
  store.removeItem('kiln.token');
  $('who').textContent = '';
  $('logout').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = msg || '';
  $('login-error').hidden = !msg;
  $('login-project').value = project();
  $('token').focus();
}

function setupHeader() {
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    store.setItem('kiln.token', $('token').value.trim());
    if ($('login-project').value.trim()) store.setItem('kiln.project', $('login-project').value.trim());
    $('token').value = '';
    $('login').hidden = true;
    route();
  });
  $('project').value = project();
  $('project-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    store.setItem('kiln.project', $('project').value.trim() || 'default');
    location.hash = '#/jobs';
    route();
  });
  $('logout').addEventListener('click', () => {
    store.removeItem('kiln.token');
    showLogin('');
  });
}

// ---------- the job list ----------

function jobRow(j, showPos) {
  const id = j.jobId;
  return h('tr', { 'data-job': id },
    h('td', {}, h('a', { href: `#/jobs/${encodeURIComponent(id)}`, class: 'job-link' }, id)),
    h('td', {}, stateBadge(j.state)),
    h('td', {}, fmtTime(j.createTime)),
    h('td', { class: 'num' }, fmtDuration(j)),
    h('td', {}, accelerators(j) || h('span', { class: 'muted' }, 'CPU only')),
    showPos ? h('td', { class: 'num' }, j.jobPosition || '') : null);
}

function jobTable(jobs, showPos, empty) {
  return h('table', { id: 'jobs-table' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Job'), h('th', {}, 'State'), h('th', {}, 'Created'),
      h('th', { class: 'num' }, 'Duration'), h('th', {}, 'Accelerators'),
      showPos ? h('th', { class: 'num' }, 'Queue position') : null)),
    h('tbody', {}, jobs.length ? jobs.map((j) => jobRow(j, showPos))
      : h('tr', {}, h('td', { colspan: 6, class: 'muted' }, empty))));
}

function pageJobs(params) {
  const filter = params.get('filter') || '';
  const size = params.get('pageSize') || '50';
  const tokens = ['']; // page tokens seen, for "previous"
  let page = 0;
  const input = h('input', { type: 'text', id: 'filter', value: filter,
    placeholder: 'jobId:mnist* AND state:RUNNING', spellcheck: 'false' });
  const sizeSel = h('select', { id: 'page-size' },
    ['20', '50', '100'].map((n) => h('option', { value: n, selected: n === size }, n)));
  const form = h('form', { class: 'toolbar', id: 'filter-form', onsubmit: (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    if (input.value.trim()) q.set('filter', input.value.trim());
    q.set('pageSize', sizeSel.value);
    location.hash = '#/jobs?' + q.toString();
  } }, h('label', { for: 'filter' }, 'Filter'), input, sizeSel, h('button', { type: 'submit' }, 'Apply'));
  const body = h('div', { id: 'jobs' });
  const prev = h('button', { id: 'prev', type: 'button', disabled: true }, '‹ Previous');
  const next = h('button', { id: 'next', type: 'button', disabled: true }, 'Next ›');
  const where = h('span', { class: 'muted', id: 'page-no' });
  prev.addEventListener('click', () => { if (page > 0) { page--; refresh(); } });
  next.addEventListener('click', () => { if (tokens[page + 1]) { page++; refresh(); } });
  $('page').replaceChildren(h('h1', {}, 'Jobs ', h('span', { class: 'muted' }, project())), form,
    body, h('div', { class: 'pager' }, prev, where, next));
  const gen = generation;
  const refresh = async () => {
    const q = new URLSearchParams({ pageSize: size });
    if (filter) q.set('filter', filter);
    if (tokens[page]) q.set('pageToken', tokens[page]);
    const r = await api(jobsPath('?' + q.toString()));
    if (gen !== generation) return;
    tokens[page + 1] = r.nextPageToken || '';
    body.replaceChildren(jobTable(r.jobs || [], true, filter ? 'No job matches.' : 'No jobs yet.'));
    // the time from navigation to the first full table, for anyone measuring
    // (the dashboard test holds it under a second with 1,000 jobs)
    if (!performance.getEntriesByName('kiln-jobs-rendered').length) performance.mark('kiln-jobs-rendered');
    prev.disabled = page === 0;
    next.disabled = !r.nextPageToken;
    where.textContent = `page ${page + 1}`;
  };
  poll(refresh, POLL_MS);
}

// ---------- the queue ----------

function pageQueue() {
  const body = h('div', { id: 'queue' });
  $('page').replaceChildren(h('h1', {}, 'Queue ', h('span', { class: 'muted' }, project())),
    h('p', { class: 'muted' }, 'QUEUED jobs in the order they will be placed: priority, then submit time.'),
    body);
  const show = (all, gen) => {
    if (gen !== generation) return;
    all.sort((a, b) => Number(a.jobPosition || 1e9) - Number(b.jobPosition || 1e9));
    body.replaceChildren(jobTable(all, true, 'The queue is empty.'));
  };
  poll(async (gen) => {
    let all = [], tok = '';
    for (let i = 0; i < 20; i++) { // at most 2,000 queued jobs shown
      const q = new URLSearchParams({ filter: 'state:QUEUED', pageSize: '100' });
      if (tok) q.set('pageToken', tok);
      const r = await api(jobsPath('?' + q.toString()));
      all = all.concat(r.jobs || []);
      tok = r.nextPageToken;
      if (!tok) break;
      // a long queue: show the first 100 (the oldest, the head of the queue
      // unless priorities say otherwise) while the rest come in
      if (i === 0 && !performance.getEntriesByName('kiln-queue-rendered').length) {
        show(all.slice(), gen);
        performance.mark('kiln-queue-rendered');
      }
    }
    show(all, gen);
    if (!performance.getEntriesByName('kiln-queue-rendered').length) performance.mark('kiln-queue-rendered');
    if (!performance.getEntriesByName('kiln-queue-complete').length) performance.mark('kiln-queue-complete');
  }, POLL_MS * 2);
}

// ---------- notebooks ----------

// Opens an instance's JupyterLab (its proxyUri, behind kilnd) in a new tab:
// the tab carries no Authorization header, so kilnd first sets the token as
// an HttpOnly cookie for /notebooks/ (docs/notebooks.md).
async function openNotebook(uri) {
  const tab = window.open('about:blank', '_blank');
  try {
    await api('/v1/notebooks:signin', { method: 'POST', body: '{}' });
    if (tab) tab.location = uri; else window.location = uri;
  } catch (e) {
    if (tab) tab.close();
    showError(e);
  }
}

function pageNotebooks() {
  const body = h('tbody', {});
  $('page').replaceChildren(h('h1', {}, 'Notebooks'),
    h('p', { class: 'muted' }, 'Create instances with gcloud notebooks instances create (docs/notebooks.md).'),
    h('table', { id: 'notebooks' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'State'), h('th', {}, 'Location'),
        h('th', {}, 'Machine'), h('th', {}, 'GPUs'), h('th', {}, 'Node'), h('th', {}, 'Last event'),
        h('th', {}, ''))),
      body));
  poll(async (gen) => {
    const r = await api(`/v1/projects/${encodeURIComponent(project())}/locations/-/instances`);
    if (gen !== generation) return;
    const list = r.instances || [];
    if (!list.length) {
      body.replaceChildren(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No notebook instances in this project.')));
      return;
    }
    body.replaceChildren(...list.map((n) => {
      const parts = (n.name || '').split('/');
      const k = n.kiln || {};
      const acc = n.acceleratorConfig || {};
      const held = (k.gpus || []).length;
      const ev = (k.events || [])[(k.events || []).length - 1];
      return h('tr', { 'data-notebook': parts[5] || '' },
        h('td', {}, parts[5] || n.name), h('td', {}, stateBadge(n.state)),
        h('td', {}, parts[3] || ''), h('td', {}, n.machineType || ''),
        h('td', { class: 'gpus' }, acc.coreCount ? `${acc.coreCount} × ${acc.type}` : 'none',
          held ? h('span', { class: 'muted' }, ` (held: GPU ${k.gpus.join(', ')})`) : null),
        h('td', {}, k.node || ''),
        h('td', { class: 'muted' }, ev ? `${fmtTime(ev.time)}: ${ev.message}` : ''),
        h('td', {}, n.proxyUri ? h('a', { href: n.proxyUri, class: 'open-lab', target: '_blank',
          rel: 'noopener', onclick: (e) => { e.preventDefault(); openNotebook(n.proxyUri); } },
        'Open JupyterLab') : ''));
    }));
  }, POLL_MS * 2);
}

// ---------- nodes ----------

function pageNodes() {
  const body = h('div', { id: 'nodes' });
  $('page').replaceChildren(h('h1', {}, 'Nodes'), body);
  poll(async (gen) => {
    const r = await api('/v1/nodes');
    if (gen !== generation) return;
    body.replaceChildren(...(r.nodes || []).map((n) => {
      const cap = Object.entries(n.capacity || {}).filter(([k]) => k !== 'cpu' && k !== 'memoryGb');
      return h('div', { class: 'card node', 'data-node': n.name },
        h('h2', {}, n.name, n.cordoned ? h('span', { class: 'state cordoned' }, 'CORDONED (drained)')
          : h('span', { class: 'state ready' }, 'READY'),
          n.simulatedAccelerators ? h('span', { class: 'muted' }, 'simulated accelerators') : null),
        h('dl', { class: 'kv' },
          h('dt', {}, 'address'), h('dd', {}, n.address || ''),
          h('dt', {}, 'CPUs'), h('dd', {}, `${n.cpus} (${n.allocatable.cpu} allocatable)`),
          h('dt', {}, 'memory'), h('dd', {}, `${num(n.memoryGb, 1)} GB`),
          h('dt', {}, 'accelerators'), h('dd', {}, cap.length ? cap.map(([t, c]) =>
            `${t}: ${n.allocatable[t]} of ${c} free`).join('; ') : 'none')),
        (n.devices || []).length ? h('table', { class: 'devices' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Device'), h('th', {}, 'Type'), h('th', {}, 'UUID'),
            h('th', {}, 'Health'), h('th', { class: 'num' }, 'Util'), h('th', { class: 'num' }, 'Memory'),
            h('th', {}, 'Held by'), h('th', {}, 'Replica'))),
          h('tbody', {}, n.devices.map((d) => h('tr', { 'data-gpu': d.index },
            h('td', {}, `GPU ${d.index}`, d.simulated ? h('span', { class: 'muted' }, ' (simulated)') : null),
            h('td', { title: d.model || '' }, d.type), h('td', { class: 'muted' }, d.uuid),
            // a failed GPU: its Xid and what it means, or what else took it out
            h('td', { class: 'health', 'data-health': d.health || '' },
              d.health && d.health !== 'OK' ? h('span', { class: 'state FAILED' }, d.health) : (d.health || ''),
              d.reason ? h('div', { class: d.health === 'OK' ? 'muted' : 'error' }, d.reason) : null,
              d.lastXid ? h('div', { class: 'muted' }, `last Xid ${d.lastXid}: ${d.xidMeaning || ''}`) : null),
            h('td', { class: 'num' }, d.telemetry && d.telemetry.utilization !== undefined
              ? `${d.telemetry.utilization}%` : ''),
            h('td', { class: 'num' }, d.telemetry && d.telemetry.memoryUsedGb !== undefined
              ? `${num(d.telemetry.memoryUsedGb, 1)} GB` : ''),
            // d.job is projects/P/jobs/J: the link switches to the job's project
            h('td', { class: 'held-by' }, d.job ? h('a', { href: '#/jobs/' +
              encodeURIComponent(d.job.split('/')[3]), title: d.job,
              onclick: () => store.setItem('kiln.project', d.job.split('/')[1]) }, d.job.split('/')[3])
              : d.assigned ? 'another project' : h('span', { class: 'muted' }, 'free')),
            h('td', { class: 'task' }, d.task || ''))))) : null,
        (n.devices || []).some((d) => d.telemetry) ? gpuCharts(n.name, null, 0) : null);
    }));
  }, POLL_MS);
}

// Utilisation and memory over time of a node's GPUs (all of them, or those
// whose UUIDs are in `only`, since `since` in Unix seconds), from the GPU
// watch's samples (GET /v1/nodes/NODE:gpuHistory).
function gpuCharts(node, only, since) {
  const box = h('div', { class: 'gpu-charts', 'data-node': node });
  api('/v1/nodes/' + encodeURIComponent(node) + ':gpuHistory').then((r) => {
    const gpus = (r.gpus || []).filter((g) => !only || only.includes(g.uuid));
    box.replaceChildren(...gpus.map((g) => {
      const pts = (g.points || []).filter((p) => p[0] >= since);
      const t0 = pts.length ? pts[0][0] : 0;
      const series = (k) => pts.filter((p) => p[k] >= 0).map((p) => [Math.round(p[0] - t0), p[k]]);
      const cu = h('canvas', { class: 'chart-gpu-util', 'aria-label': `GPU ${g.index} utilisation` });
      const cm = h('canvas', { class: 'chart-gpu-mem', 'aria-label': `GPU ${g.index} memory` });
      requestAnimationFrame(() => { drawChart(cu, series(1), '#1f7a3a', 's'); drawChart(cm, series(2), '#1f5fbf', 's'); });
      return h('div', { class: 'charts', 'data-gpu': g.index },
        h('div', { class: 'chart' }, h('h3', {}, `GPU ${g.index} utilisation (%) `,
          h('span', { class: 'muted' }, g.model)), cu),
        h('div', { class: 'chart' }, h('h3', {}, `GPU ${g.index} memory used (GB)`), cm));
    }));
  }).catch(() => {});
  return box;
}

// ---------- one job ----------

// A line chart of one series on a canvas; pts: [[x, y]...]; xl names x.
function drawChart(canvas, pts, color, xl = 'epoch') {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300, hh = canvas.clientHeight || 150;
  canvas.width = w * dpr;
  canvas.height = hh * dpr;
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, hh);
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = '#6b6b70';
  if (!pts.length) {
    g.fillText('no reports yet', 10, hh / 2);
    return;
  }
  const L = 46, R = 8, T = 8, B = 20;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (w - L - R);
  const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (hh - T - B);
  g.strokeStyle = '#dedcd8';
  g.lineWidth = 1;
  for (let i = 0; i <= 3; i++) {
    const y = y0 + ((y1 - y0) * i) / 3;
    g.beginPath(); g.moveTo(L, Y(y)); g.lineTo(w - R, Y(y)); g.stroke();
    g.fillText(Math.abs(y) >= 100 ? y.toFixed(0) : y.toPrecision(3), 2, Y(y) + 4);
  }
  g.fillText(`${xl} ${x0}`, L, hh - 5);
  const lab = `${xl} ${x1}`;
  g.fillText(lab, w - R - g.measureText(lab).width, hh - 5);
  g.strokeStyle = color;
  g.fillStyle = color;
  g.lineWidth = 2;
  g.beginPath();
  pts.forEach((p, i) => (i ? g.lineTo(X(p[0]), Y(p[1])) : g.moveTo(X(p[0]), Y(p[1]))));
  g.stroke();
  pts.forEach((p) => { g.beginPath(); g.arc(X(p[0]), Y(p[1]), 3, 0, 7); g.fill(); });
}

const SERIES = [
  ['loss', 'Loss', '#b8461c'],
  ['accuracy', 'Accuracy', '#1f7a3a'],
  ['samplesPerSecond', 'Samples per second', '#1f5fbf'],
];

function renderMetrics(box, points) {
  // epoch reports only: the final "done" line repeats the last epoch's numbers
  const eps = points.filter((p) => p.event === 'epoch' || p.event === 'metrics');
  const xOf = (p, i) => (p.epoch !== undefined ? p.epoch : i + 1);
  box.setAttribute('data-points', JSON.stringify(eps.map((p, i) => ({
    x: xOf(p, i), loss: p.loss, accuracy: p.accuracy, samplesPerSecond: p.samplesPerSecond }))));
  const charts = SERIES.map(([key, title, color]) => {
    const c = h('canvas', { id: 'chart-' + key, 'aria-label': title });
    const pts = eps.map((p, i) => [xOf(p, i), p[key]]).filter((p) => Number.isFinite(p[1]));
    const last = pts.length ? pts[pts.length - 1][1] : undefined;
    const div = h('div', { class: 'chart' }, h('h3', {}, title, ' ',
      h('span', { class: 'muted' }, last === undefined ? '' : num(last, key === 'samplesPerSecond' ? 0 : 4))), c);
    requestAnimationFrame(() => drawChart(c, pts, color));
    return div;
  });
  const table = h('details', {}, h('summary', {}, `${eps.length} report${eps.length === 1 ? '' : 's'} (table)`),
    h('table', { id: 'metrics-table' },
      h('thead', {}, h('tr', {}, ['Epoch', 'Step', 'Loss', 'Accuracy', 'Test accuracy', 'Samples/s', 'Task', 'Time']
        .map((t) => h('th', {}, t)))),
      h('tbody', {}, eps.map((p, i) => h('tr', {},
        h('td', { class: 'num' }, xOf(p, i)), h('td', { class: 'num' }, p.step ?? ''),
        h('td', { class: 'num' }, num(p.loss, 4)), h('td', { class: 'num' }, num(p.accuracy, 4)),
        h('td', { class: 'num' }, num(p.testAccuracy, 4)), h('td', { class: 'num' }, num(p.samplesPerSecond, 0)),
        h('td', {}, p.task || ''), h('td', {}, fmtTime(p.time)))))));
  if (eps.length) box.replaceChildren(h('div', { class: 'charts' }, charts), table);
  else box.replaceChildren(h('p', { class: 'muted' },
    'No training metrics reported (yet). kiln-train reports one point per epoch.'));
}

function renderTrials(box, job) {
  const to = job.trainingOutput || {};
  if (!to.isHyperparameterTuningJob) {
    box.replaceChildren(h('p', { class: 'muted', id: 'trials-empty' }, 'Not a hyperparameter tuning job.'));
    return;
  }
  const trials = to.trials || [];
  if (!trials.length) {
    box.replaceChildren(h('p', { class: 'muted', id: 'trials-empty' },
      'No trials yet.'));
    return;
  }
  const c = h('canvas', { id: 'chart-trials' });
  const pts = trials.map((t) => [Number(t.trialId), Number(t.finalMetric && t.finalMetric.objectiveValue)])
    .filter((p) => Number.isFinite(p[1]));
  requestAnimationFrame(() => drawChart(c, pts, '#b8461c'));
  box.replaceChildren(h('div', { class: 'chart' }, h('h3', {}, 'Objective by trial'), c),
    h('table', { id: 'trials-table' }, h('thead', {}, h('tr', {}, ['Trial', 'State', 'Hyperparameters', 'Objective', 'Step']
      .map((t) => h('th', {}, t)))),
    h('tbody', {}, trials.map((t) => h('tr', {}, h('td', {}, t.trialId), h('td', {}, stateBadge(t.state)),
      h('td', {}, Object.entries(t.hyperparameters || {}).map(([k, v]) => `${k}=${v}`).join(' ')),
      h('td', { class: 'num' }, num(t.finalMetric && t.finalMetric.objectiveValue, 4)),
      h('td', { class: 'num' }, (t.finalMetric && t.finalMetric.trainingStep) || ''))))));
}

function pageJob(id) {
  const gen = generation;
  const head = h('h1', {}, id);
  const actions = h('div', { class: 'toolbar', id: 'actions' });
  const summary = h('div', { class: 'card', id: 'summary' });
  const replicas = h('div', { id: 'replicas' });
  const metrics = h('div', { id: 'metrics' });
  const gpus = h('div', { id: 'gpus' }, h('p', { class: 'muted' }, 'No GPU telemetry for this job.'));
  let gpuAt = 0;
  const trials = h('div', { id: 'trials' });
  const events = h('pre', { class: 'logs', id: 'events' });
  const logs = h('pre', { class: 'logs', id: 'logs' });
  const spec = h('pre', { id: 'spec' });
  const follow = h('input', { type: 'checkbox', id: 'follow', checked: true });
  $('page').replaceChildren(h('p', {}, h('a', { href: '#/jobs' }, '← all jobs')), head, actions, summary,
    h('h2', {}, 'Replicas'), replicas,
    h('h2', {}, 'Training metrics'), metrics,
    h('h2', {}, 'GPUs'), gpus,
    h('h2', {}, 'Trials'), trials,
    h('h2', {}, 'Events'), events,
    h('h2', {}, 'Logs ', h('label', { class: 'muted' }, follow, ' follow')), logs,
    h('h2', {}, 'Spec'), h('div', { class: 'card' }, spec));
  let state = '';
  let asking = false;

  const cancelButtons = () => {
    const active = ['QUEUED', 'PREPARING', 'RUNNING'].includes(state);
    if (asking && active) {
      actions.replaceChildren(h('span', { class: 'confirm' }, 'Cancel this job?',
        h('button', { id: 'cancel-confirm', class: 'danger', type: 'button', onclick: doCancel }, 'Yes, cancel it'),
        h('button', { type: 'button', onclick: () => { asking = false; cancelButtons(); } }, 'No')));
    } else {
      actions.replaceChildren(h('button', { id: 'cancel', type: 'button', disabled: !active,
        onclick: () => { asking = true; cancelButtons(); } }, 'Cancel job'));
    }
  };
  const doCancel = async () => {
    asking = false;
    try {
      await api(jobsPath(`/${encodeURIComponent(id)}:cancel`), { method: 'POST', body: '{}' });
    } catch (e) { showError(e); }
  };

  poll(async () => {
    const j = await api(jobsPath('/' + encodeURIComponent(id)));
    if (gen !== generation) return;
    const changed = j.state !== state;
    state = j.state;
    head.replaceChildren(id, ' ', stateBadge(j.state));
    if (changed) cancelButtons();
    const ks = j.kilnStatus || {}, to = j.trainingOutput || {}, m = to.metrics || {};
    // its GPUs' utilisation and memory since it started, every few seconds
    const held = (ks.replicas || []).filter((r) => (r.gpuUuids || []).length && !r.simulatedGpus);
    if (held.length && j.startTime && Date.now() - gpuAt > 5000) {
      gpuAt = Date.now();
      const since = new Date(j.startTime).getTime() / 1000;
      gpus.replaceChildren(...[...new Set(held.map((r) => r.node))].map((node) =>
        gpuCharts(node, held.filter((r) => r.node === node).flatMap((r) => r.gpuUuids), since)));
    }
    summary.replaceChildren(h('dl', { class: 'kv' },
      h('dt', {}, 'created'), h('dd', {}, fmtTime(j.createTime)),
      h('dt', {}, 'started'), h('dd', {}, fmtTime(j.startTime)),
      j.endTime ? [h('dt', {}, 'ended'), h('dd', {}, fmtTime(j.endTime))] : null,
      h('dt', {}, 'duration'), h('dd', {}, fmtDuration(j)),
      j.jobPosition ? [h('dt', {}, 'queue position'), h('dd', { id: 'position' }, j.jobPosition)] : null,
      // kilnd --queues: its queue, place in its ClusterQueue and why it waits (docs/queues.md)
      ks.queue ? [h('dt', {}, 'queue'), h('dd', { id: 'kueue' },
        `${ks.queue.localQueue || '?'} -> ClusterQueue ${ks.queue.clusterQueue || '?'}` +
        (ks.queue.positionInClusterQueue ? `, position ${ks.queue.positionInClusterQueue}` : '')),
      h('dt', {}, 'waiting because'), h('dd', { id: 'kueue-reason' }, ks.queue.reason || '')] : null,
      (ks.conditions || []).map((c) => [h('dt', {}, c.type), h('dd', { class: 'error' }, c.message || c.reason)]),
      h('dt', {}, 'accelerators'), h('dd', {}, accelerators(j) || 'none'),
      h('dt', {}, 'restarts'), h('dd', {}, `${ks.restarts || 0} (${ks.failures || 0} charged to the backoff limit)`),
      h('dt', {}, 'consumed ML units'), h('dd', { id: 'ml-units' }, num(to.consumedMLUnits, 4)),
      to.gpuHours !== undefined ? [h('dt', {}, 'GPU-hours'), h('dd', { id: 'gpu-hours' }, num(to.gpuHours, 4))] : null,
      to.meanGpuUtilization !== undefined ? [h('dt', {}, 'mean GPU utilisation'),
        h('dd', { id: 'gpu-util' }, `${num(to.meanGpuUtilization, 1)}%`)] : null,
      m.loss !== undefined ? [h('dt', {}, 'last report'), h('dd', { id: 'last-metrics' },
        `epoch ${m.epoch ?? '?'}: loss ${num(m.loss, 4)}, accuracy ${num(m.accuracy, 4)}, ${num(m.samplesPerSecond, 0)} samples/s`)] : null,
      j.errorMessage ? [h('dt', {}, 'error'), h('dd', { class: 'error' }, j.errorMessage)] : null));
    const reps = ks.replicas || [];
    replicas.replaceChildren(reps.length ? h('table', { id: 'replicas-table' },
      h('thead', {}, h('tr', {}, ['Replica', 'Node', 'Devices', 'State', 'Restarts', 'Exit code', 'Port']
        .map((t) => h('th', {}, t)))),
      h('tbody', {}, reps.map((r) => h('tr', { 'data-task': r.task },
        h('td', {}, r.task), h('td', {}, r.node),
        h('td', {}, (r.gpus || []).length ? r.gpus.map((g) => `GPU ${g}`).join(', ') +
          (r.simulatedGpus ? ' (simulated)' : '') : 'CPU'),
        h('td', {}, stateBadge(r.state)), h('td', { class: 'num' }, r.restarts ?? 0),
        h('td', { class: 'num' }, r.exitCode ?? ''), h('td', { class: 'num' }, r.port || '')))))
      : h('p', { class: 'muted' }, j.state === 'QUEUED' ? 'Not placed yet.' : 'No replicas recorded.'));
    renderTrials(trials, j);
    const sp = JSON.stringify({ jobId: j.jobId, labels: j.labels, trainingInput: j.trainingInput }, null, 2);
    if (spec.textContent !== sp) spec.textContent = sp;
  }, POLL_MS);

  poll(async () => {
    const r = await api(jobsPath(`/${encodeURIComponent(id)}:metrics`));
    if (gen !== generation) return;
    renderMetrics(metrics, r.points || []);
  }, POLL_MS * 2);

  // logs follow from a byte offset, like `kiln jobs stream-logs`
  let offset = '0';
  poll(async () => {
    for (let i = 0; i < 20; i++) { // catch up at most 20 chunks per tick
      const r = await api(jobsPath(`/${encodeURIComponent(id)}:logs?offset=${offset}`));
      if (gen !== generation) return;
      for (const e of r.entries || []) {
        const line = h('div', { class: 'line ' + e.severity },
          h('span', { class: 'muted' }, (e.timestamp || '').slice(11, 23) + ' '),
          h('span', { class: 'task' }, e.taskName + ' '), e.message);
        (e.taskName === 'service' ? events : logs).append(line);
      }
      const more = r.nextOffset !== offset && (r.entries || []).length;
      offset = r.nextOffset || offset;
      if (follow.checked) {
        logs.scrollTop = logs.scrollHeight;
        events.scrollTop = events.scrollHeight;
      }
      if (!more) break;
    }
  }, 1000);
}

// ---------- routing ----------

function route() {
  generation++;
  timers.forEach(clearTimeout);
  timers = [];
  $('login').hidden = true;
  $('status').hidden = true;
  $('project').value = project();
  $('logout').hidden = !store.getItem('kiln.token');
  $('who').textContent = store.getItem('kiln.token') ? 'signed in' : '';
  const hash = location.hash.replace(/^#/, '') || '/jobs';
  const [path, qs] = hash.split('?');
  const parts = path.split('/').filter(Boolean);
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.id === 'nav-' + parts[0]);
  if (parts[0] === 'jobs' && parts[1]) return pageJob(decodeURIComponent(parts[1]));
  if (parts[0] === 'queue') return pageQueue();
  if (parts[0] === 'nodes') return pageNodes();
  if (parts[0] === 'notebooks') return pageNotebooks();
  return pageJobs(new URLSearchParams(qs || ''));
}

window.addEventListener('hashchange', route);
document.addEventListener('DOMContentLoaded', () => {
  setupHeader();
  route();
});
