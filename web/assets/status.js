// kvgate status page: polls api/status about once a second and redraws the
// tables and the load chart. Every string from the gateway (worker ids,
// URLs, model names, labels) is written with textContent or as an attribute
// value, never parsed as markup.
'use strict';

(function () {
  const POLL_MS = 1000;
  const WINDOW_MS = 5 * 60 * 1000; // the chart's span, and the history kept
  const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
    '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const SVG_NS = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);

  let samples = []; // history samples, oldest first
  let newest = 0; // time of the newest sample held (Unix ms)
  let workerIDs = []; // in the gateway's order, for the chart legend
  const colors = new Map(); // worker id → color, stable while the page lives

  // ---- formatting: every function returns plain text ----

  const dash = '–';
  function int(n) { return n == null ? dash : Math.round(n).toLocaleString('en-US'); }
  function pct(x) {
    if (x == null) return dash;
    return (x > 0 && x < 0.1 ? (100 * x).toFixed(1) : Math.round(100 * x)) + '%';
  }
  function fixed2(x) { return x == null ? dash : x.toFixed(2); }
  function seconds(s) {
    if (s == null) return dash;
    if (s < 10) return s.toFixed(1) + ' s';
    if (s < 120) return Math.round(s) + ' s';
    return Math.round(s / 60) + ' min';
  }
  function span(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    if (d > 0) return d + 'd ' + h + 'h';
    if (h > 0) return h + 'h ' + m + 'm';
    if (m > 0) return m + 'm ' + Math.floor(s % 60) + 's';
    return Math.floor(s) + 's';
  }
  function setText(id, text) {
    const node = $(id);
    if (node.textContent !== text) node.textContent = text;
  }
  // known maps a gateway state to a class name from a fixed set, so that no
  // string from the wire ever becomes a class.
  function known(prefix, value, allowed) {
    return allowed.includes(value) ? prefix + value : '';
  }
  function colorOf(id) {
    if (!colors.has(id)) colors.set(id, PALETTE[colors.size % PALETTE.length]);
    return colors.get(id);
  }

  // ---- tables ----

  // syncRows keeps one row per item, keyed and ordered as items are, and
  // rewrites a cell only when its text or class changed: rows are not
  // rebuilt every second, so selecting text on the page keeps working.
  function syncRows(table, items, key, columns) {
    const tbody = table.tBodies[0];
    const old = new Map();
    for (const tr of Array.from(tbody.rows)) old.set(tr.dataset.key, tr);
    let prev = null;
    for (const item of items) {
      const k = key(item);
      let tr = old.get(k);
      if (tr) {
        old.delete(k);
      } else {
        tr = document.createElement('tr');
        tr.dataset.key = k;
        for (const c of columns) {
          const td = document.createElement('td');
          td.dataset.label = c.label;
          td.dataset.col = c.name;
          tr.appendChild(td);
        }
      }
      columns.forEach((c, i) => {
        const td = tr.cells[i];
        const text = c.text(item);
        if (td.textContent !== text) td.textContent = text;
        const cls = [c.num ? 'num' : '', c.wrap ? 'wrap' : '', c.cls ? c.cls(item) : ''].filter(Boolean).join(' ');
        if (td.className !== cls) td.className = cls;
      });
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of old.values()) tr.remove();
  }

  const staleIf = (w) => (w.telemetry && !w.telemetry.fresh ? 'stale' : '');
  const workerColumns = [
    { name: 'id', label: 'Worker', text: (w) => w.id },
    { name: 'health', label: 'Health', text: (w) => w.health, cls: (w) => known('state-', w.health, ['healthy', 'unhealthy', 'draining']) },
    { name: 'circuit', label: 'Circuit', text: (w) => w.circuit.replace('_', '-'), cls: (w) => known('state-', w.circuit, ['closed', 'open', 'half_open']) },
    { name: 'running', label: 'Running', num: true, text: (w) => (w.telemetry ? int(w.telemetry.running) : dash), cls: staleIf },
    { name: 'waiting', label: 'Waiting', num: true, text: (w) => (w.telemetry ? int(w.telemetry.waiting) : dash), cls: staleIf },
    { name: 'kv', label: 'KV', num: true, text: (w) => (w.telemetry ? pct(w.telemetry.kv_usage) : dash), cls: staleIf },
    {
      name: 'age', label: 'Telemetry age', num: true,
      text: (w) => (w.telemetry ? seconds(w.telemetry.age_seconds) + (w.telemetry.fresh ? '' : ' stale') : 'none'),
      cls: staleIf,
    },
    { name: 'pressure', label: 'Pressure', num: true, text: (w) => fixed2(w.pressure) },
    { name: 'inflight', label: 'In flight', num: true, text: (w) => int(w.inflight) },
    { name: 'blocks', label: 'Prefix blocks', num: true, text: (w) => int(w.prefix_blocks) },
    { name: 'models', label: 'Models', wrap: true, text: (w) => (w.models.length ? w.models.join(', ') : 'not learned yet') },
    { name: 'url', label: 'URL', wrap: true, text: (w) => w.url },
  ];

  const decisionColumns = [
    { name: 'label', label: 'Decision', text: (d) => d.label },
    { name: 'minute', label: 'Last minute', num: true, text: (d) => int(d.last_minute) },
    { name: 'total', label: 'Since start', num: true, text: (d) => int(d.total) },
  ];

  const partitionColumns = [
    { name: 'name', label: 'Partition', text: (p) => p.name },
    { name: 'weight', label: 'Weight', num: true, text: (p) => String(p.weight) },
    { name: 'queued', label: 'Queued', num: true, text: (p) => int(p.queued) },
    { name: 'inflight', label: 'In flight', num: true, text: (p) => int(p.inflight) },
    { name: 'served', label: 'Served tokens', num: true, text: (p) => int(p.served_tokens) },
    { name: 'seeds', label: 'Seeds in flight', num: true, text: (p) => int(p.seeds_inflight) },
  ];

  function render(s) {
    const routable = s.workers.filter((w) => w.routable).length;
    setText('summary', s.workers.length + ' workers, ' + routable + ' routable · policy ' + s.routing.policy +
      (s.routing.seeding ? ' with seeding' : ''));
    syncRows($('workers'), s.workers, (w) => w.id, workerColumns);

    const r = s.routing;
    setText('policy', r.policy + (r.seeding ? ' (seeding on)' : ''));
    setText('index-blocks', r.index_blocks == null ? 'none (the policy keeps no index)' : int(r.index_blocks) + ' blocks');
    setText('hit-minute', pct(r.prefix_hit_ratio.last_minute));
    setText('hit-total', pct(r.prefix_hit_ratio.total));
    syncRows($('decisions'), r.decisions, (d) => d.label, decisionColumns);
    $('decisions').hidden = r.decisions.length === 0;
    $('decisions-empty').hidden = r.decisions.length > 0;

    setText('admission-mode', s.admission.mode);
    setText('admission-outstanding', int(s.admission.outstanding));
    syncRows($('partitions'), s.partitions, (p) => p.name, partitionColumns);
    $('partitions').hidden = s.partitions.length === 0;
    $('partitions-empty').hidden = s.partitions.length > 0;

    setText('updated', new Date(s.generated_at).toLocaleTimeString());
    setText('uptime', span(s.uptime_seconds));

    workerIDs = s.workers.map((w) => w.id);
    for (const h of s.history.samples) {
      if (h.t > newest) {
        samples.push(h);
        newest = h.t;
      }
    }
    samples = samples.filter((h) => h.t >= newest - WINDOW_MS);
    drawChart();
  }

  // ---- chart ----

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }

  // niceCeil rounds a maximum up to 1, 2 or 5 times a power of ten.
  function niceCeil(x) {
    if (x <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
    return 10 * p;
  }

  function drawChart() {
    const chart = $('chart');
    const metric = $('chart-metric').value === 'inflight' ? 'inflight' : 'queue';
    const W = Math.max(chart.clientWidth, 200), H = Math.max(chart.clientHeight, 100);
    const left = 36, right = 8, top = 8, bottom = 20;
    chart.setAttribute('viewBox', '0 0 ' + W + ' ' + H);

    const end = newest || Date.now(), start = end - WINDOW_MS;
    const ids = workerIDs.slice();
    let peak = 0;
    for (const h of samples) for (const id of ids) peak = Math.max(peak, h[metric][id] || 0);
    const ymax = niceCeil(peak);
    const x = (t) => left + ((t - start) / WINDOW_MS) * (W - left - right);
    const y = (v) => top + (1 - v / ymax) * (H - top - bottom);

    const parts = [];
    for (const v of [0, ymax / 2, ymax]) {
      parts.push(svg('line', { class: 'grid', x1: left, x2: W - right, y1: y(v), y2: y(v) }));
      const label = svg('text', { class: 'axis', x: left - 6, y: y(v) + 4, 'text-anchor': 'end' });
      label.textContent = Number.isInteger(v) ? String(v) : v.toFixed(1);
      parts.push(label);
    }
    for (let m = 5; m >= 0; m--) {
      const label = svg('text', { class: 'axis', x: x(end - m * 60000), y: H - 4, 'text-anchor': m === 5 ? 'start' : m === 0 ? 'end' : 'middle' });
      label.textContent = m === 0 ? 'now' : '-' + m + 'm';
      parts.push(label);
    }
    // One polyline per unbroken run of samples: a worker without fresh
    // telemetry (or absent) leaves a gap rather than a line to zero.
    for (const id of ids) {
      let points = [];
      const flush = () => {
        if (points.length > 1) {
          parts.push(svg('polyline', { points: points.join(' '), stroke: colorOf(id), 'data-worker': id }));
        }
        points = [];
      };
      for (const h of samples) {
        const v = h[metric][id];
        if (v == null) {
          flush();
          continue;
        }
        points.push(x(h.t).toFixed(1) + ',' + y(v).toFixed(1));
      }
      flush();
    }
    chart.replaceChildren(...parts);

    const legend = $('chart-legend');
    const items = ids.map((id) => {
      const item = document.createElement('span');
      const swatch = document.createElement('span');
      swatch.className = 'swatch';
      swatch.style.background = colorOf(id);
      item.append(swatch, document.createTextNode(id));
      return item;
    });
    legend.replaceChildren(...items);
  }

  // ---- polling ----

  function setConnection(ok, detail) {
    const conn = $('conn');
    conn.className = 'conn ' + (ok ? 'live' : 'down');
    conn.textContent = ok ? 'live' : 'disconnected: ' + detail;
  }

  async function poll() {
    try {
      const url = newest > 0 ? 'api/status?since=' + newest : 'api/status';
      const res = await fetch(url, { cache: 'no-store', headers: { Accept: 'application/json' } });
      if (!res.ok) throw new Error('HTTP ' + res.status);
      render(await res.json());
      setConnection(true);
    } catch (err) {
      setConnection(false, err && err.message ? err.message : String(err));
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  $('chart-metric').addEventListener('change', drawChart);
  window.addEventListener('resize', drawChart);
  poll();
})();
