/* mlprof dashboard: renders the embedded report (and, live, the one it polls)
 * as tables and inline SVG. Every string from the profile is put in the page
 * as text (textContent, createTextNode, attribute values), never as markup. */
(function () {
  'use strict';
  var SVGNS = 'http://www.w3.org/2000/svg';
  var D = JSON.parse(document.getElementById('mlprof-data').textContent);
  var COLORS = ['#2f6fde', '#e8590c', '#2b8a3e', '#ae3ec9', '#c8372d', '#0c8599',
    '#d98a00', '#5c7cfa', '#862e9c', '#495057'];
  var PARTS = ['data', 'forward', 'backward', 'optimizer', 'communication', 'other'];
  /* One colour per zone category (and step part), the same in every chart;
   * zones without a category take one of NAME_COLORS by their name. */
  var PART_COLORS = {data: '#0c8599', forward: '#2f6fde', backward: '#ae3ec9',
    optimizer: '#2b8a3e', communication: '#e8590c', io: '#d98a00', other: '#adb5bd'};
  var NAME_COLORS = ['#c8372d', '#8d6e63', '#e64980', '#74b816', '#495057', '#7048e8'];
  var TABS = [['overview', 'Overview'], ['zones', 'Zones'], ['timeline', 'Timeline'], ['spans', 'Spans'],
    ['memory', 'Memory'], ['gpu', 'GPU'], ['findings', 'Findings'],
    ['processes', 'Processes']];
  var state = {tab: 'overview', sortKey: 'total_ns', sortDesc: true, zoom: null,
    flameRoot: -1, byModule: false, openModules: {}};
  var tip;

  /* ---- DOM helpers -------------------------------------------------------- */
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    addKids(e, kids);
    return e;
  }
  function sv(tag, attrs, kids) {
    var e = document.createElementNS(SVGNS, tag);
    setAttrs(e, attrs);
    addKids(e, kids);
    return e;
  }
  function setAttrs(e, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined) return;
      if (k === 'text') e.textContent = String(v);
      else if (k.slice(0, 2) === 'on') e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, String(v));
    });
  }
  function addKids(e, kids) {
    if (kids === null || kids === undefined) return;
    if (!Array.isArray(kids)) kids = [kids];
    kids.forEach(function (k) {
      if (k === null || k === undefined || k === false) return;
      e.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
    });
  }
  function titled(node, s) {
    node.appendChild(sv('title', {text: s}));
    return node;
  }
  function card(title, kids) {
    return el('div', {class: 'card'}, [title ? el('h2', {text: title}) : null].concat(kids));
  }

  /* ---- formatting ------------------------------------------------------- */
  function num(x, d) {
    if (x === null || x === undefined || !isFinite(x)) return '–';
    var a = Math.abs(x);
    if (d === undefined) d = a >= 100 ? 0 : a >= 10 ? 1 : 2;
    return x.toFixed(d);
  }
  function fmtNs(ns) {
    if (ns === null || ns === undefined || !isFinite(ns)) return '–';
    var a = Math.abs(ns);
    if (a >= 60e9) return num(ns / 60e9) + ' min';
    if (a >= 1e9) return num(ns / 1e9) + ' s';
    if (a >= 1e6) return num(ns / 1e6) + ' ms';
    if (a >= 1e3) return num(ns / 1e3) + ' µs';
    return num(ns, 0) + ' ns';
  }
  function fmtBytes(b) {
    if (b === null || b === undefined || !isFinite(b)) return '–';
    var u = ['B', 'kB', 'MB', 'GB', 'TB'], i = 0, a = Math.abs(b);
    while (a >= 1000 && i < u.length - 1) { a /= 1000; b /= 1000; i++; }
    return num(b) + ' ' + u[i];
  }
  function fmtUnit(name) {
    if (/_ns$/.test(name)) return fmtNs;
    if (/_share$/.test(name)) return function (v) { return num(100 * v) + '%'; };
    if (/_mb$/.test(name)) return function (v) { return num(v) + ' MB'; };
    if (/_mb_per_(min|step)$/.test(name)) return function (v) { return num(v) + ' MB/' + name.replace(/.*_/, ''); };
    if (/_bytes_per_s$/.test(name)) return function (v) { return fmtBytes(v) + '/s'; };
    if (/_bytes(_s)?$/.test(name)) return function (v) { return fmtBytes(v) + (/_s$/.test(name) ? '/s' : ''); };
    if (/_pct$/.test(name)) return function (v) { return num(v) + '%'; };
    if (/_w$/.test(name)) return function (v) { return num(v) + ' W'; };
    if (/_c$/.test(name)) return function (v) { return num(v) + ' °C'; };
    if (/_j$/.test(name)) return function (v) { return num(v) + ' J'; };
    if (/_mhz$/.test(name)) return function (v) { return num(v) + ' MHz'; };
    return function (v) { return num(v); };
  }
  function sevColor(s) {
    return s >= 70 ? 'var(--bad)' : s >= 40 ? 'var(--warn)' : 'var(--ok)';
  }

  /* ---- data access ------------------------------------------------------ */
  function R() { return D.report || {}; }
  function arr(x) { return Array.isArray(x) ? x : []; }
  function series(pred) { return arr(D.series).filter(pred); }
  function subjectName(s) {
    if (s.subject === 'process') return 'pid ' + s.id + (s.label ? ' (' + s.label + ')' : '');
    if (s.subject === 'gpu') return 'GPU ' + s.id + (s.label ? ' (' + s.label + ')' : '');
    if (s.subject === 'counter') return s.measure;
    return 'system' + (s.host ? ' ' + s.host : '');
  }
  function measureOf(subject, name) {
    var res = R().resources;
    if (!res) return null;
    var subs = arr(res.subjects).filter(function (s) { return s.subject === subject; });
    for (var i = 0; i < subs.length; i++) {
      var m = arr(subs[i].measures).filter(function (x) { return x.name === name; })[0];
      if (m) return m;
    }
    return null;
  }
  function treeMeasure(name) {
    var res = R().resources;
    if (!res || !res.tree) return null;
    return arr(res.tree.measures).filter(function (x) { return x.name === name; })[0] || null;
  }

  var zoneCats = {src: null, cat: {}};
  /* The colour of a zone: its category's, else one picked by its name. */
  function zoneColor(name) {
    if (zoneCats.src !== R().zones) {
      zoneCats = {src: R().zones, cat: {}};
      arr(R().zones).forEach(function (z) { zoneCats.cat[z.name] = z.category; });
    }
    var c = PART_COLORS[zoneCats.cat[name]];
    if (c) return c;
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
    return NAME_COLORS[Math.abs(h) % NAME_COLORS.length];
  }

  /* The text colour that reads on a background of colour hex (#rrggbb):
   * white or the page's ink, whichever contrasts more (WCAG's relative
   * luminance). A style, so that svg text's own fill does not win. */
  function inkOn(hex) {
    var m = /^#([0-9a-f]{6})$/i.exec(hex || '');
    if (!m) return '#fff';
    var v = parseInt(m[1], 16), lum = 0;
    [[16, 0.2126], [8, 0.7152], [0, 0.0722]].forEach(function (c) {
      var x = ((v >> c[0]) & 255) / 255;
      lum += c[1] * (x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4));
    });
    var ink = 0.0168; /* luminance of #1d2330, the page's ink */
    return (1.05 / (lum + 0.05)) >= (lum + 0.05) / (ink + 0.05) ? '#fff' : '#1d2330';
  }

  /* ---- axes ------------------------------------------------------------- */
  /* A step of 1, 2 or 5 times a power of ten giving about count steps over
   * range; in minutes (0.5, 1, 2, 5, ...) for time above half a minute, so
   * fmtNs prints it round. */
  function niceStep(range, count, time) {
    var raw = range / Math.max(1, count);
    if (time && raw >= 30e9) return 60e9 * niceStep(raw / 60e9, 1);
    if (!(raw > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  /* The multiples of step in [lo, hi]. */
  function ticks(lo, hi, step) {
    var out = [];
    for (var k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(k * step);
    return out;
  }
  /* A tick label without the trailing zeros num() pads with (2.50 → 2.5). */
  function tickText(fmt, v) {
    return fmt(v).replace(/^(-?\d+\.\d*?)0+(?!\d)/, '$1').replace(/^(-?\d+)\.(?!\d)/, '$1');
  }

  /* ---- charts ----------------------------------------------------------- */
  function showTip(ev, s) {
    tip.textContent = s;
    tip.style.display = 'block';
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 300) + 'px';
    tip.style.top = (ev.clientY + 12) + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  /* A line chart of several series over job time, sharing state.zoom: drag
   * to zoom, double-click to reset. opts: fmt, height, marks, bands
   * ([{t0, t1, label}]), points ([{t, v, label, attrs, onclick}]: markers
   * drawn over the chart, clickable). */
  function lineChart(list, opts) {
    opts = opts || {};
    var W = 900, H = opts.height || 200, L = 70, Rm = 10, T = 10, B = 24;
    var fmt = opts.fmt || function (v) { return num(v); };
    /* Every chart on the job's time, from its start. */
    var tmin = 0, tmax = R().wall_ns || 0, any = false;
    list.forEach(function (s) {
      if (s.t.length) { any = true; tmax = Math.max(tmax, s.t[s.t.length - 1]); }
    });
    if (!any) return el('p', {class: 'muted', text: 'no samples'});
    if (state.zoom) { tmin = state.zoom[0]; tmax = state.zoom[1]; }
    if (tmax <= tmin) tmax = tmin + 1;
    var vmax = 0, vmin = 0;
    list.forEach(function (s) {
      for (var i = 0; i < s.t.length; i++)
        if (s.t[i] >= tmin && s.t[i] <= tmax) { vmax = Math.max(vmax, s.v[i]); vmin = Math.min(vmin, s.v[i]); }
    });
    if (vmax <= vmin) vmax = vmin + 1;
    var vstep = niceStep(vmax - vmin, 4);
    vmin = Math.floor(vmin / vstep + 1e-9) * vstep; vmax = Math.ceil(vmax / vstep - 1e-9) * vstep;
    function X(t) { return L + (t - tmin) / (tmax - tmin) * (W - L - Rm); }
    function Y(v) { return T + (1 - (v - vmin) / (vmax - vmin)) * (H - T - B); }
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', class: 'chart'});
    var clip = 'c' + Math.random().toString(36).slice(2);
    g.appendChild(sv('defs', null, sv('clipPath', {id: clip}, sv('rect', {x: L, y: 0, width: W - L - Rm, height: H}))));
    ticks(vmin, vmax, vstep).forEach(function (v) {
      var y = Y(v);
      g.appendChild(sv('line', {x1: L, x2: W - Rm, y1: y, y2: y, stroke: '#eef0f4'}));
      g.appendChild(sv('text', {x: L - 4, y: y + 4, 'text-anchor': 'end', class: 'tick y', text: tickText(fmt, v)}));
    });
    ticks(tmin, tmax, niceStep(tmax - tmin, 6, true)).forEach(function (t) {
      var x = X(t);
      g.appendChild(sv('text', {x: x, y: H - 6, 'text-anchor': x < L + 20 ? 'start' : x > W - Rm - 20 ? 'end' : 'middle', class: 'tick x', text: tickText(fmtNs, t)}));
    });
    var plot = sv('g', {'clip-path': 'url(#' + clip + ')'});
    arr(opts.bands).forEach(function (b) {
      var x0 = X(b.t0), x1 = X(b.t1);
      plot.appendChild(titled(sv('rect', {x: x0, y: T, width: Math.max(2, x1 - x0), height: H - T - B, fill: 'rgba(200,55,45,.12)', stroke: 'rgba(200,55,45,.5)'}), b.label));
      plot.appendChild(sv('text', {x: x0 + 4, y: T + 12, fill: '#c8372d', text: b.label.slice(0, 80)}));
    });
    var marks = arr(opts.marks).filter(function (m) { return m >= tmin && m <= tmax; });
    /* Too many marks to tell apart would only grey the chart. */
    if (marks.length > 150) marks = [];
    marks.forEach(function (m) {
      plot.appendChild(sv('line', {x1: X(m), x2: X(m), y1: T, y2: H - B, stroke: '#c5cad3', 'stroke-dasharray': '2,3'}));
    });
    list.forEach(function (s, i) {
      var pts = [];
      for (var j = 0; j < s.t.length; j++) pts.push(X(s.t[j]).toFixed(1) + ',' + Y(s.v[j]).toFixed(1));
      plot.appendChild(sv('polyline', {points: pts.join(' '), fill: 'none', stroke: s.color || COLORS[i % COLORS.length], 'stroke-width': 1.5}));
    });
    g.appendChild(plot);
    g.appendChild(sv('line', {x1: L, x2: W - Rm, y1: H - B, y2: H - B, stroke: '#9aa1ad'}));
    var sel = sv('rect', {x: 0, y: T, width: 0, height: H - T - B, fill: 'rgba(47,111,222,.15)', display: 'none'});
    var cursor = sv('line', {y1: T, y2: H - B, stroke: '#888', display: 'none'});
    g.appendChild(sel);
    g.appendChild(cursor);
    var hit = sv('rect', {x: L, y: T, width: W - L - Rm, height: H - T - B, fill: 'transparent', style: 'cursor:crosshair'});
    g.appendChild(hit);
    var drag = null;
    function px(ev) {
      var r = g.getBoundingClientRect();
      return (ev.clientX - r.left) * W / r.width;
    }
    function tAt(x) { return tmin + (x - L) / (W - L - Rm) * (tmax - tmin); }
    hit.addEventListener('mousedown', function (ev) { drag = px(ev); ev.preventDefault(); });
    hit.addEventListener('mousemove', function (ev) {
      var x = px(ev);
      cursor.setAttribute('x1', x); cursor.setAttribute('x2', x); cursor.setAttribute('display', '');
      if (drag !== null) {
        sel.setAttribute('display', '');
        sel.setAttribute('x', Math.min(drag, x));
        sel.setAttribute('width', Math.abs(x - drag));
      }
      var t = tAt(x), lines = [fmtNs(t)];
      list.forEach(function (s) {
        var best = -1, bd = Infinity;
        for (var j = 0; j < s.t.length; j++) { var d = Math.abs(s.t[j] - t); if (d < bd) { bd = d; best = j; } }
        if (best >= 0) lines.push(s.name + ': ' + fmt(s.v[best]));
      });
      showTip(ev, lines.join('\n'));
    });
    hit.addEventListener('mouseleave', function () { cursor.setAttribute('display', 'none'); hideTip(); });
    hit.addEventListener('mouseup', function (ev) {
      if (drag === null) return;
      var x = px(ev), a = Math.min(drag, x), b = Math.max(drag, x);
      drag = null;
      sel.setAttribute('display', 'none');
      if (b - a > 4) { state.zoom = [tAt(a), tAt(b)]; render(); }
    });
    arr(opts.points).forEach(function (p) {
      if (p.t < tmin || p.t > tmax) return;
      var x = X(p.t), y = Y(p.v);
      g.appendChild(sv('line', {x1: x, x2: x, y1: y, y2: H - B, stroke: '#c8372d', 'stroke-dasharray': '3,2', 'pointer-events': 'none'}));
      var m = titled(sv('circle', Object.assign({cx: x, cy: y, r: 6, fill: '#c8372d', stroke: '#fff', 'stroke-width': 2,
        style: p.onclick ? 'cursor:pointer' : null}, p.attrs || {})), p.label);
      if (p.onclick) m.addEventListener('click', p.onclick);
      g.appendChild(m);
      g.appendChild(sv('text', {x: x + (x > W - 160 ? -9 : 9), y: Math.max(y - 8, T + 10), 'text-anchor': x > W - 160 ? 'end' : 'start', fill: '#c8372d', 'pointer-events': 'none', text: p.label.split('\n')[0]}));
    });
    g.addEventListener('dblclick', function () { state.zoom = null; render(); });
    var legend = el('div', {class: 'legend'}, list.map(function (s, i) {
      return el('span', null, [el('i', {style: 'background:' + (s.color || COLORS[i % COLORS.length])}), s.name]);
    }));
    return el('div', null, [legend, g]);
  }

  /* Horizontal bars: rows [{name, value, err, color, tip}], fmt. */
  function barChart(rows, fmt) {
    var W = 900, rowH = 20, L = 220, H = rows.length * rowH + 24;
    var vmax = 0;
    rows.forEach(function (r) { vmax = Math.max(vmax, r.value + (r.err || 0)); });
    if (vmax <= 0) vmax = 1;
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%'});
    rows.forEach(function (r, i) {
      var y = i * rowH + 4, w = r.value / vmax * (W - L - 90);
      g.appendChild(sv('text', {x: L - 6, y: y + 13, 'text-anchor': 'end', text: r.name.length > 34 ? r.name.slice(0, 33) + '…' : r.name}));
      g.appendChild(titled(sv('rect', {x: L, y: y + 2, width: Math.max(1, w), height: rowH - 6, fill: r.color || COLORS[0], 'data-name': r.name, rx: 2}), r.tip || (r.name + ': ' + fmt(r.value))));
      if (r.err) {
        var x0 = L + Math.max(0, r.value - r.err) / vmax * (W - L - 90), x1 = L + (r.value + r.err) / vmax * (W - L - 90);
        g.appendChild(sv('line', {x1: x0, x2: x1, y1: y + rowH / 2 - 1, y2: y + rowH / 2 - 1, stroke: '#1d2330'}));
        g.appendChild(sv('line', {x1: x1, x2: x1, y1: y + 5, y2: y + rowH - 7, stroke: '#1d2330'}));
      }
      g.appendChild(sv('text', {x: L + Math.max(1, w) + (r.err ? (r.err / vmax * (W - L - 90)) : 0) + 6, y: y + 13, text: fmt(r.value) + (r.err ? ' ± ' + fmt(r.err) : '')}));
    });
    return g;
  }

  /* Stacked bars, one per step bucket: buckets [[first, n, part ns...]]. */
  function stepChart(buckets) {
    var W = 900, H = 220, L = 70, B = 24, T = 10;
    var tot = buckets.map(function (b) {
      var s = 0; for (var p = 0; p < PARTS.length; p++) s += b[2 + p] / Math.max(1, b[1]); return s;
    });
    var vmax = Math.max.apply(null, tot.concat([1])), step = niceStep(vmax, 4, true);
    vmax = Math.ceil(vmax / step - 1e-9) * step;
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', class: 'steps'});
    var bw = (W - L - 10) / buckets.length;
    ticks(0, vmax, step).forEach(function (v) {
      var y = T + (1 - v / vmax) * (H - T - B);
      g.appendChild(sv('line', {x1: L, x2: W - 10, y1: y, y2: y, stroke: '#eef0f4'}));
      g.appendChild(sv('text', {x: L - 4, y: y + 4, 'text-anchor': 'end', class: 'tick y', text: tickText(fmtNs, v)}));
    });
    buckets.forEach(function (b, i) {
      var y0 = H - B, n = Math.max(1, b[1]);
      PARTS.forEach(function (p, j) {
        var v = b[2 + j] / n, h = v / vmax * (H - T - B);
        if (h <= 0) return;
        y0 -= h;
        g.appendChild(titled(sv('rect', {x: L + i * bw + 0.5, y: y0, width: Math.max(0.5, bw - 1), height: h, fill: PART_COLORS[p]}),
          'step ' + b[0] + (b[1] > 1 ? '–' + (b[0] + b[1] - 1) : '') + ': ' + p + ' ' + fmtNs(v) + ' per step'));
      });
    });
    g.appendChild(sv('text', {x: L, y: H - 6, text: 'step ' + buckets[0][0]}));
    var last = buckets[buckets.length - 1];
    g.appendChild(sv('text', {x: W - 10, y: H - 6, 'text-anchor': 'end', text: 'step ' + (last[0] + last[1] - 1)}));
    var legend = el('div', {class: 'legend'}, PARTS.map(function (p) {
      return el('span', null, [el('i', {style: 'background:' + PART_COLORS[p] + ';height:10px'}), p]);
    }));
    return el('div', null, [legend, g]);
  }

  /* The zone hierarchy (D.tree: zone paths by nesting per thread, merged)
   * as an icicle: width is total time; click a frame to zoom into it
   * (state.flameRoot, the node's index, kept across renders), the top bar
   * to zoom out. */
  function zoneFlame() {
    var tr = D.tree, nodes = arr(tr && tr.nodes), names = arr(tr && tr.names);
    if (!nodes.length) return el('p', {class: 'muted', text: 'no zones'});
    var all = {name: 'all zones', value: 0, children: []}, made = [];
    nodes.forEach(function (n, i) {
      var x = made[i] = {name: names[n[0]], value: n[2], calls: n[3], index: i, children: []};
      var up = n[1] >= 0 ? made[n[1]] : null; /* parents come first */
      (up || all).children.push(x);
      if (!up) all.value += n[2];
    });
    var host = el('div');
    icicle(host, all, {id: 'zone-flame', title: 'all zones ' + fmtNs(all.value), root: made[state.flameRoot] || null,
      color: function (n) { return zoneColor(n.name); },
      tip: function (n, total) {
        if (n === all) return 'all: ' + fmtNs(all.value);
        return n.name + '\ntotal ' + fmtNs(n.value) + ' (' + num(100 * n.value / total) + '%), ' + n.calls + ' calls';
      },
      onzoom: function (n) { state.flameRoot = n ? n.index : -1; }});
    return host;
  }

  /* ---- views ------------------------------------------------------------ */
  function figures(list) {
    return el('div', {class: 'grid'}, list.filter(Boolean).map(function (f) {
      return el('div', {class: 'fig'}, [el('div', {class: 'k', text: f[0]}), el('div', {class: 'v', text: f[1]})]);
    }));
  }

  function findingsList(list, limit) {
    if (!list.length) return el('p', {class: 'muted', text: 'No findings in this report.'});
    return el('div', null, list.slice(0, limit || list.length).map(function (f) {
      var sev = +f.severity || 0, ev = f.evidence, rows = [];
      if (Array.isArray(ev)) ev.forEach(function (e) { rows.push([e.key, e.value]); });
      else if (ev && typeof ev === 'object') Object.keys(ev).forEach(function (k) { rows.push([k, ev[k]]); });
      return el('div', {class: 'card finding'}, [
        el('div', null, [el('span', {class: 'sev', style: 'background:' + sevColor(sev), text: num(sev, 0)}), ' ',
          el('b', {text: f.type || 'finding'}), f.zone ? el('span', {class: 'mono', text: '  ' + f.zone}) : null,
          f.flagged ? el('span', {class: 'muted', text: '  (' + f.flagged + ')'}) : null]),
        f.summary ? el('p', {text: f.summary}) : null,
        rows.length ? el('div', null, rows.map(function (r) {
          var v = typeof r[1] === 'number' ? fmtUnit(r[0])(r[1]) : String(r[1]);
          return el('span', {class: 'chip'}, [el('span', {class: 'muted', text: r[0] + ' '}), v]);
        })) : null,
        f.recommendation ? el('p', null, [el('b', {text: 'What to do: '}), f.recommendation]) : null,
        f.note ? el('p', {class: 'muted', text: f.note}) : null]);
    }));
  }

  function findings() {
    return arr(R().findings).slice().sort(function (a, b) { return (b.severity || 0) - (a.severity || 0); });
  }

  function stepsCard() {
    var st = R().steps, kids = [];
    if (st && typeof st === 'object' && (st.count || st.steps)) {
      var share = st.share || st.parts || {};
      var figs = [['steps', String(st.count || st.steps)], ['mean step', fmtNs(st.mean_ns)],
        ['p50 step', fmtNs(st.p50_ns)], ['p90 step', fmtNs(st.p90_ns)]];
      kids.push(figures(figs));
      var rows = [];
      PARTS.forEach(function (p, i) {
        var v = Array.isArray(share) ? share[i] : share[p];
        if (typeof v === 'object' && v) v = v.share;
        if (typeof v === 'number') rows.push({name: p, value: v * 100, color: PART_COLORS[p]});
      });
      if (rows.length) kids.push(barChart(rows, function (v) { return num(v) + '%'; }));
    }
    if (arr(D.step_buckets).length) {
      kids.push(el('p', {class: 'hint', text: 'Time per step by part (self time of the zones of the thread with the most step marks; bars group consecutive steps when there are many).'}));
      kids.push(stepChart(D.step_buckets));
    }
    return kids.length ? card('Step-time breakdown', kids) : null;
  }

  function viewOverview() {
    var r = R(), res = r.resources, procs = arr(r.processes), out = [];
    var root = procs[0] || {};
    var figs = [['wall time', fmtNs(r.wall_ns)], ['spans', String(r.spans)], ['zones', String(r.zones_total)],
      ['processes', String(procs.length)], ['threads', String(arr(r.threads).length)],
      ['dropped events', String(r.dropped)]];
    var cpu = treeMeasure('cpu_pct'), rss = treeMeasure('rss_bytes');
    if (cpu) figs.push(['CPU of the tree (mean / peak)', num(cpu.mean) + '% / ' + num(cpu.max) + '%']);
    if (rss) figs.push(['RSS of the tree (peak)', fmtBytes(rss.max)]);
    if (res) {
      figs.push(['GPUs', res.gpus ? String(res.gpus) : 'none']);
      if (res.energy && res.energy.cpu_j !== null) figs.push(['CPU energy', num(res.energy.cpu_j) + ' J']);
      if (res.energy && res.energy.gpu_j !== null) figs.push(['GPU energy', num(res.energy.gpu_j) + ' J']);
      if (res.energy && res.energy.carbon_g !== null) figs.push(['carbon', num(res.energy.carbon_g) + ' g CO2e']);
    }
    out.push(card('Run', [
      el('p', {class: 'mono', text: (root.cmdline || root.exe || '') + (root.hostname ? '  @ ' + root.hostname : '')}),
      figures(figs)]));
    var w = arr(r.warnings);
    if (w.length) out.push(card('Warnings', el('ul', null, w.map(function (s) { return el('li', {class: 'warn', text: s}); }))));
    out.push(stepsCard());
    var f = findings();
    if (f.length) out.push(card('Top findings', findingsList(f, 3)));
    var zs = arr(r.zones).slice().sort(function (a, b) { return b.total_ns - a.total_ns; }).slice(0, 10);
    out.push(card('Top zones by total time', barChart(zs.map(function (z, i) {
      return {name: z.name, value: z.total_ns, color: zoneColor(z.name)};
    }), fmtNs)));
    var cpuS = series(function (s) { return s.subject === 'process' && s.measure === 'cpu_pct'; });
    if (cpuS.length) out.push(card('CPU % per process', lineChart(cpuS.slice(0, 8).map(function (s) { return {name: subjectName(s), t: s.t, v: s.v}; }), {fmt: function (v) { return num(v) + '%'; }, marks: D.marks, height: 160})));
    return out;
  }

  var ZCOLS = [['name', 'zone'], ['category', 'category'], ['count', 'count'], ['total_ns', 'total'],
    ['self_ns', 'self'], ['mean_ns', 'mean'], ['std_ns', 'std'], ['p50_ns', 'p50'], ['p90_ns', 'p90'],
    ['p99_ns', 'p99'], ['max_ns', 'max'], ['share', 'share']];
  function viewZones() {
    var zs = arr(R().zones).slice(), key = state.sortKey, desc = state.sortDesc;
    zs.sort(function (a, b) {
      var x = a[key], y = b[key], c = typeof x === 'string' ? String(x).localeCompare(String(y)) : (x - y);
      return desc ? -c : c;
    });
    var head = el('tr', null, ZCOLS.map(function (c) {
      return el('th', {class: c[0] === key ? 'sorted' + (desc ? '' : ' asc') : '', text: c[1], onclick: function () {
        if (state.sortKey === c[0]) state.sortDesc = !state.sortDesc; else { state.sortKey = c[0]; state.sortDesc = c[0] !== 'name' && c[0] !== 'category'; }
        render();
      }});
    }));
    var body = (state.byModule ? byModule(zs) : zs).map(function (z) {
      if (z.members) return moduleRow(z);
      return el('tr', z.module ? {class: 'member'} : null, ZCOLS.map(function (c) {
        var v = z[c[0]];
        if (c[0] === 'name') return el('td', {class: 'name', title: z.name, text: z.name});
        if (c[0] === 'category' || c[0] === 'count') return el('td', {text: v});
        if (c[0] === 'share') return el('td', {text: num(100 * v) + '%'});
        return el('td', {text: fmtNs(v)});
      }));
    });
    var top = zs.slice(0, 25);
    return [
      card('Zones (' + zs.length + (R().zones_total > zs.length ? ' of ' + R().zones_total : '') + ')', [moduleToggle(),
        el('div', {style: 'max-height:480px;overflow:auto'}, el('table', {id: 'zones'}, [el('thead', null, head), el('tbody', null, body)]))]),
      card('Mean and standard deviation (first 25 in this order)', barChart(top.map(function (z, i) {
        return {name: z.name, value: z.mean_ns, err: z.std_ns, color: zoneColor(z.name),
          tip: z.name + '\nmean ' + fmtNs(z.mean_ns) + ' ± ' + fmtNs(z.std_ns) + '\np50 ' + fmtNs(z.p50_ns) + ', p99 ' + fmtNs(z.p99_ns)};
      }), fmtNs)),
      card('Flame graph of the zone hierarchy', [el('p', {class: 'hint', text: 'Width is total time, nesting per thread; click a frame to zoom in.'}), zoneFlame()])].concat(linesCards());
  }

  /* Line timings (R().lines, one row per line): each timed function's
   * source with a heat bar per line, its share of the function's time. */
  function linesCards() {
    var funcs = [], by = {};
    arr(R().lines).forEach(function (l) {
      var k = l.file + ':' + l.first_line + ':' + l.function;
      if (!by[k]) { by[k] = {name: l.function, file: l.file, first: l.first_line, rows: []}; funcs.push(by[k]); }
      by[k].rows.push(l);
    });
    return funcs.map(function (f) {
      var body = f.rows.map(function (l) {
        var share = Math.max(0, Math.min(100, +l.share || 0));
        return el('tr', null, [el('td', {text: l.line}), el('td', {text: l.hits}), el('td', {text: fmtNs(l.total_ns)}),
          el('td', {text: fmtNs(l.exclusive_ns)}),
          el('td', {class: 'heat', title: num(share) + '% of the function\'s time'}, [el('i', {style: 'width:' + share.toFixed(1) + '%'}), el('span', {text: num(share) + '%'})]),
          el('td', {class: 'src', text: l.source})]);
      });
      return card('Lines of ' + f.name + ' (' + f.file + ':' + f.first + ')', el('table', {class: 'lines'}, [
        el('thead', null, el('tr', null, ['line', 'hits', 'total', 'exclusive', 'share', 'source'].map(function (h, i) { return el('th', {class: i === 5 ? 'l' : '', text: h}); }))),
        el('tbody', null, body)]));
    });
  }

  /* Python call zones (backend="calls": `module.Class.method`,
   * `module.function`) collapsed into one row per module, which a click
   * opens. The module is the dotted prefix before the first class (a
   * capitalised part) or the function whose `<locals>` follow, else every
   * part but the last. Other names (spaces, no dot, the main script's
   * `Class.method`, which has no module) stay rows. */
  function moduleOf(name) {
    if (!/^[A-Za-z_]\w*(\.(<\w+>|[A-Za-z_]\w*))+$/.test(name)) return null;
    var parts = name.split('.'), end = parts.length - 1;
    for (var i = 0; i < parts.length; i++)
      if (/^[A-Z]/.test(parts[i]) || parts[i + 1] === '<locals>') { end = i; break; }
    return end > 0 ? parts.slice(0, end).join('.') : null;
  }
  function byModule(zs) {
    var groups = {}, out = [];
    zs.forEach(function (z) {
      var m = moduleOf(z.name);
      if (m === null) { out.push(z); return; }
      var g = groups[m];
      if (!g) {
        g = groups[m] = {name: m, members: [], count: 0, total_ns: 0, self_ns: 0, share: 0, max_ns: 0};
        out.push(g);
      }
      g.members.push(z);
      g.count += z.count; g.total_ns += z.total_ns; g.self_ns += z.self_ns; g.share += z.share;
      g.max_ns = Math.max(g.max_ns, z.max_ns);
    });
    var rows = [];
    out.forEach(function (g) {
      if (!g.members) { rows.push(g); return; }
      g.mean_ns = g.total_ns / Math.max(1, g.count);
      rows.push(g);
      if (state.openModules[g.name]) g.members.forEach(function (z) { rows.push(Object.assign({module: g.name}, z)); });
    });
    return rows;
  }
  function moduleRow(g) {
    var open = !!state.openModules[g.name];
    return el('tr', {class: 'module', 'data-module': g.name, onclick: function () { state.openModules[g.name] = !open; render(); }}, ZCOLS.map(function (c) {
      if (c[0] === 'name') return el('td', {class: 'name', title: g.name}, [(open ? '▾ ' : '▸ ') + g.name, el('span', {class: 'tag', text: g.members.length + (g.members.length === 1 ? ' function' : ' functions')})]);
      if (c[0] === 'category') return el('td', {text: 'module'});
      if (c[0] === 'count') return el('td', {text: g.count});
      if (c[0] === 'share') return el('td', {text: num(100 * g.share) + '%'});
      if (c[0] === 'total_ns' || c[0] === 'self_ns' || c[0] === 'mean_ns' || c[0] === 'max_ns') return el('td', {text: fmtNs(g[c[0]])});
      return el('td', {class: 'muted', text: '–'});
    }));
  }
  function moduleToggle() {
    if (!arr(R().zones).some(function (z) { return moduleOf(z.name) !== null; })) return null;
    var box = el('input', {type: 'checkbox', id: 'by-module', onchange: function () { state.byModule = box.checked; render(); }});
    box.checked = state.byModule;
    return el('label', {class: 'hint'}, [box, ' Collapse Python calls (module.function, module.Class.method) by module; click a module to open it. A module\'s total adds its functions\' totals, so nested calls count more than once.']);
  }

  function chartCard(title, list, fmt, extra) {
    if (!list.length) return null;
    return card(title, lineChart(list, Object.assign({fmt: fmt, marks: D.marks}, extra || {})));
  }
  function named(list) { return list.map(function (s) { return {name: subjectName(s), t: s.t, v: s.v}; }); }
  function bySubj(subject, measure) {
    return series(function (s) { return s.subject === subject && s.measure === measure; });
  }

  function viewTimeline() {
    var out = [el('p', {class: 'hint', text: 'Drag across a chart to zoom, double-click to reset. Dashed lines are step marks.' + (state.zoom ? ' Zoomed: ' + fmtNs(state.zoom[0]) + ' – ' + fmtNs(state.zoom[1]) : '')})];
    var sys = series(function (s) { return s.subject === 'system' && (s.measure === 'cpu_user_pct' || s.measure === 'cpu_system_pct' || s.measure === 'cpu_iowait_pct'); });
    out.push(chartCard('CPU % per process', named(bySubj('process', 'cpu_pct')), fmtUnit('cpu_pct')));
    out.push(chartCard('System CPU', sys.map(function (s) { return {name: s.measure, t: s.t, v: s.v}; }), fmtUnit('x_pct')));
    out.push(chartCard('RSS per process', named(bySubj('process', 'rss_bytes')), fmtBytes));
    out.push(chartCard('GPU utilization', named(bySubj('gpu', 'gpu_util_pct')), fmtUnit('x_pct')));
    out.push(chartCard('GPU memory used', named(bySubj('gpu', 'gpu_mem_used_bytes')), fmtBytes));
    var power = bySubj('system', 'cpu_power_w').concat(bySubj('gpu', 'gpu_power_w'));
    out.push(chartCard('Power', power.map(function (s) { return {name: subjectName(s) + ' ' + s.measure, t: s.t, v: s.v}; }), fmtUnit('x_w')));
    var counters = series(function (s) { return s.subject === 'counter'; });
    counters.slice(0, 6).forEach(function (s) { out.push(chartCard('Counter: ' + s.measure, [{name: s.measure, t: s.t, v: s.v}], null)); });
    if (out.filter(Boolean).length === 1) out.push(card(null, el('p', {class: 'muted', text: 'No samples in these profiles (record with mlprof run, or sampling on).'})));
    return out;
  }

  function leakBands(subject, id) {
    return arr(R().leaks).filter(function (l) { return !subject || (l.subject === subject && (id === undefined || l.id === id)); }).map(function (l) {
      var g = l.growth_mb !== undefined ? num(l.growth_mb) + ' MB' : '';
      return {t0: l.begin_ns || 0, t1: l.end_ns || 0, label: 'leak? ' + (l.measure || '') + ' +' + g + (l.slope_mb_per_min !== undefined ? ' (' + num(l.slope_mb_per_min) + ' MB/min)' : '')};
    });
  }
  /* ---- icicle ------------------------------------------------------------
   * A generic icicle (flame graph, outermost on top) of a tree {name, value,
   * children: [...]} drawn as SVG into host (its content replaced; each
   * node gets a parent link). Click a frame to zoom into it, the top bar to
   * zoom out. opts: id (the svg's), width (its viewBox's, 900 otherwise),
   * title (the top bar's text), color(node), label(node) (the text drawn on
   * a frame; its name otherwise), tip(node, total, top) (the hover text, in
   * the dashboard's tip; total: the zoomed frame's value), mark(node) (drawn
   * outlined), onzoom(node or null) (after a click zooms in or out), root
   * (a node to start zoomed on), maxDepth (the most rows drawn under the top
   * bar). Frames narrower than half a pixel are left out. Each frame's rect
   * carries data-name, data-value and data-depth. Returns {zoom(node),
   * drawn()}: drawn lists the frames now drawn, top bar first, as {node, x,
   * w, depth}. */
  function icicle(host, tree, opts) {
    opts = opts || {};
    var W = opts.width || 900, rowH = 18, zoomed = opts.root || null, drawn = [];
    var maxDepth = opts.maxDepth || Infinity;
    function path(n) { var p = []; for (var x = n; x; x = x.parent) p.unshift(x); return p; }
    function link(n) { (n.children || []).forEach(function (c) { c.parent = n; link(c); }); }
    link(tree);
    /* The dashboard's tip follows the pointer over a frame. */
    function hover(r, n, total, top) {
      var text = opts.tip ? opts.tip(n, total, top) : n.name;
      r.addEventListener('mousemove', function (ev) { showTip(ev, text); });
      r.addEventListener('mouseleave', hideTip);
      return r;
    }
    function zoom(n) {
      hideTip(); zoomed = n; draw();
      if (opts.onzoom) opts.onzoom(n);
    }
    function draw() {
      while (host.firstChild) host.removeChild(host.firstChild);
      var top = zoomed || tree, total = top.value || 1, rows = 1;
      var g = sv('svg', {width: '100%', class: 'flame', id: opts.id || null});
      var bar = hover(sv('rect', {x: 0, y: 0, width: W, height: rowH - 1, fill: '#ced4da', style: 'cursor:pointer', 'data-name': tree.name,
        'data-value': tree.value, 'data-depth': 0}), tree, tree.value, tree);
      bar.addEventListener('click', function () { zoom(null); });
      g.appendChild(bar);
      g.appendChild(sv('text', {x: 4, y: 13, 'pointer-events': 'none',
        text: top !== tree ? '↑ ' + (opts.title || tree.name) + ' (click to zoom out) › ' + path(top).slice(1).map(function (n) { return n.name; }).join(' › ') : (opts.title || tree.name)}));
      drawn = [{node: tree, x: 0, w: W, depth: 0}];
      function frame(n, x, d, w) {
        if (w < 0.5 || d > maxDepth) return;
        rows = Math.max(rows, d + 1);
        drawn.push({node: n, x: x, w: w, depth: d});
        var c = opts.color ? opts.color(n) : COLORS[d % COLORS.length], marked = opts.mark && opts.mark(n);
        var r = hover(sv('rect', {x: x, y: d * rowH, width: Math.max(0.5, w - 0.5), height: rowH - 1, fill: c, style: 'cursor:pointer',
          stroke: marked ? '#1d2330' : null, 'stroke-width': marked ? 2 : null, class: marked ? 'marked' : null,
          'data-name': n.name, 'data-value': n.value, 'data-depth': d}), n, total, top);
        r.addEventListener('click', function () { zoom(n); });
        g.appendChild(r);
        if (w > 40) {
          var text = opts.label ? opts.label(n) : n.name;
          var label = text.length * 6.5 > w - 6 ? text.slice(0, Math.max(1, Math.floor((w - 6) / 6.5) - 1)) + '…' : text;
          g.appendChild(sv('text', {x: x + 3, y: d * rowH + 13, 'pointer-events': 'none', class: 'label', style: 'fill:' + inkOn(c), text: label}));
        }
        kids(n, x, d + 1);
      }
      function kids(n, x, d) {
        (n.children || []).slice().sort(function (a, b) { return b.value - a.value; }).forEach(function (k) {
          var kw = k.value / total * W;
          frame(k, x, d, kw); x += kw;
        });
      }
      if (top === tree) kids(tree, 0, 1);
      else frame(top, 0, 1, W);
      g.setAttribute('viewBox', '0 0 ' + W + ' ' + (rows * rowH + 2));
      host.appendChild(g);
    }
    draw();
    return {zoom: function (n) { zoomed = n; draw(); }, drawn: function () { return drawn.slice(); }};
  }

  /* ---- memory: allocations ----------------------------------------------
   * D.memory (html_memory.c, docs/memory.md): per process live bytes over
   * time with the peak and the step marks; allocation sites with their
   * stacks. The live-bytes chart marks the peak (click: what was live then);
   * the flame graph sums the sites by bytes at the peak or by bytes
   * allocated, for one process, one zone and one group of steps or all
   * (D.memory.step_sites: per group of steps the sites' bytes allocated
   * there and live at the group's peak); a leak links to its site there. */
  var mem = {by: 'peak', proc: -1, zone: -1, step: -1, site: -1, peakOf: -1};
  function M() { return D.memory || null; }
  /* Live bytes as span-timeline strips (tlSeries). */
  function memSeries() {
    var m = M();
    return m ? arr(m.processes).map(function (p) {
      return {subject: 'process', id: p.pid, label: p.cuda_device != null ? 'cuda:' + p.cuda_device : '', measure: 'live_bytes', t: p.t, v: p.v, peak_ns: p.peak_ns};
    }) : [];
  }
  /* A process of the memory data as a person reads it: its pid, and the
   * CUDA device of an entry that holds a device's memory. */
  function memProcName(p) { return 'pid ' + p.pid + (p.cuda_device != null ? ' cuda:' + p.cuda_device + ' (CUDA)' : ''); }
  function memZoneName(z) { var n = arr(M().zones)[z]; return n ? n : '(no zone)'; }
  function memFrameText(f) { return arr(M().frames)[f] || '?'; }
  /* "file:line" of a frame's text, or the native frame itself. */
  function memWhere(t) { var m = /^(.*:\d+) /.exec(t); return m ? m[1] : t; }
  /* A site as the report names it: the program's own Python lines,
   * innermost first, then the native frame (the site's s[9] and s[10]). */
  function memSiteWhere(s) {
    var py = s[9], nat = s[10];
    if (!py && !nat) return s[7].length ? memFrameText(s[7][s[7].length - 1]) : '(no stack)';
    return py && nat ? py + ' [' + nat + ']' : py || nat;
  }
  function memValue(s) { return mem.by === 'peak' ? s[2] : s[3]; }
  /* The group of steps chosen (its process's step_groups entry), or null. */
  function memGroup() {
    var p = arr(M().processes)[mem.proc];
    return p && mem.step >= 0 ? arr(p.step_groups)[mem.step] || null : null;
  }
  function memGroupName(g) { return g[1] > 1 ? 'steps ' + g[0] + '–' + (g[0] + g[1] - 1) : 'step ' + g[0]; }
  /* The flame graph's tree: all › zone › frames outermost first, with the
   * sites (indices) beneath each node. */
  function memTree() {
    var m = M(), root = {name: 'all', value: 0, count: 0, children: [], kids: {}, sites: []};
    function add(parent, name, v, c, si, key) {
      var n = parent.kids[name];
      if (!n) { n = parent.kids[name] = {name: name, value: 0, count: 0, children: [], kids: {}, sites: [], key: key}; parent.children.push(n); }
      n.value += v; n.count += c;
      if (si >= 0) n.sites.push(si);
      return n;
    }
    function site(s, i, v, c) {
      root.value += v; root.count += c; root.sites.push(i);
      var key = 'z' + s[1], n = add(root, 'zone ' + memZoneName(s[1]), v, c, i, key);
      s[7].forEach(function (f) { key += '/' + f; n = add(n, memFrameText(f), v, c, i, key); });
    }
    if (memGroup()) {
      /* One group of steps: [process, group, site (-1: the rest), allocated,
       * count, at the group's peak]. */
      arr(m.step_sites).forEach(function (e) {
        if (e[0] !== mem.proc || e[1] !== mem.step) return;
        var v = mem.by === 'peak' ? e[5] : e[3], s = e[2] >= 0 ? m.sites[e[2]] : null;
        if (v <= 0 || (mem.zone >= 0 && (!s || s[1] !== mem.zone))) return;
        if (s) return site(s, e[2], v, e[4]);
        root.value += v; root.count += e[4];
        add(root, '(other sites)', v, e[4], -1, 'other');
      });
      return root;
    }
    arr(m.sites).forEach(function (s, i) {
      if ((mem.proc >= 0 && s[0] !== mem.proc) || (mem.zone >= 0 && s[1] !== mem.zone)) return;
      var v = memValue(s);
      if (v > 0) site(s, i, v, s[4]);
    });
    if (mem.zone < 0) arr(m.other).forEach(function (o, p) {
      var v = mem.by === 'peak' ? o[0] : o[1];
      if (v <= 0 || (mem.proc >= 0 && p !== mem.proc)) return;
      root.value += v; root.count += o[2];
      add(root, '(other sites)', v, o[2], -1, 'other');
    });
    return root;
  }
  function memTip(n, total) {
    var lines = [n.name, fmtBytes(n.value) + memByText() + ' (' + num(100 * n.value / (total || 1)) + '%)',
      n.count + ' allocations' + (M().exact ? '' : ' (sampled records)')];
    if (n.key && n.key !== 'other' && n.name.indexOf('zone ') !== 0) lines.push('at ' + memWhere(n.name));
    return lines.join('\n');
  }
  /* What the flame graph's values are, as words. */
  function memByText() {
    var g = memGroup();
    return (mem.by === 'peak' ? ' live at the peak' : ' allocated') + (g ? (mem.by === 'peak' ? ' of ' : ' in ') + memGroupName(g) : '');
  }
  /* Sites beneath node n hold the selected one: draw n outlined. */
  function memMarked(n) { return mem.site >= 0 && n.sites && n.sites.indexOf(mem.site) >= 0 && n.key; }
  function memSelect(id, val, opts, onchange) {
    var s = el('select', {id: id, onchange: function () { onchange(s.value); }}, opts.map(function (o) {
      return el('option', {value: o[0], text: o[1]});
    }));
    s.value = String(val);
    return s;
  }
  /* The sites of process p live at its peak, largest first: a table. */
  function memPeakSites(p) {
    var m = M(), rows = [];
    arr(m.sites).forEach(function (s, i) { if (s[0] === p && s[2] > 0) rows.push(i); });
    rows.sort(function (a, b) { return m.sites[b][2] - m.sites[a][2]; });
    var peak = m.processes[p].peak_bytes || 1;
    return el('table', {id: 'mem-peak-sites'}, [el('tr', null, ['zone', 'at peak', 'share', 'allocated', 'count', 'where'].map(function (h, i) {
      return el('th', {class: i === 0 || i === 5 ? 'l' : '', text: h});
    }))].concat(rows.slice(0, 20).map(function (i) {
      var s = m.sites[i];
      return el('tr', {style: 'cursor:pointer', onclick: function () { memShowSite(i); }}, [el('td', {class: 'l', text: memZoneName(s[1])}),
        el('td', {text: fmtBytes(s[2])}), el('td', {text: num(100 * s[2] / peak) + '%'}), el('td', {text: fmtBytes(s[3])}),
        el('td', {text: s[4]}), el('td', {class: 'l mono', text: memSiteWhere(s)})]);
    })));
  }
  /* Shows site i in the flame graph: its process, every zone, outlined. */
  function memShowSite(i) {
    var s = M().sites[i];
    mem.site = i; mem.proc = s[0]; mem.zone = -1; mem.step = -1;
    if (memValue(s) <= 0) mem.by = s[2] > 0 ? 'peak' : 'alloc';
    render();
    var f = document.getElementById('mem-flame-card');
    if (f && f.scrollIntoView) f.scrollIntoView();
  }
  function memCards() {
    var m = M();
    if (!m) return [card('Allocations', el('p', {class: 'muted', text: 'No allocations recorded in these profiles (mlprof run records them by default; see docs/memory.md).'}))];
    var out = [], procs = arr(m.processes), est = m.exact ? '' : ' (sampled: estimates)';
    /* A live page's new data may hold fewer processes or other sites. */
    if (mem.proc >= procs.length) mem.proc = -1;
    if (!memGroup()) mem.step = -1;
    if (mem.site >= arr(m.sites).length) mem.site = -1;
    /* The charts of the process chosen (all: every process); of one group
     * of steps, the part of its series within it and the group's peak. */
    var charts = [];
    procs.forEach(function (p, i) {
      if (mem.proc >= 0 && i !== mem.proc) return;
      var g = mem.proc === i ? memGroup() : null, t = p.t, v = p.v, peak = p.peak_bytes, at = p.peak_ns, what = 'peak';
      if (g) {
        t = []; v = [];
        arr(p.t).forEach(function (x, k) { if (x >= g[2] && x <= g[3]) { t.push(x); v.push(p.v[k]); } });
        var k = 0;
        while (k < t.length && t[k] < g[5]) k++;
        if (t[k] !== g[5]) { t.splice(k, 0, g[5]); v.splice(k, 0, g[4]); }
        peak = g[4]; at = g[5]; what = 'peak of ' + memGroupName(g);
      }
      var label = what + ' ' + fmtBytes(peak) + ' at ' + fmtNs(at) + (g ? '' : '\nclick: what was live then');
      charts.push(el('div', null, [el('b', {text: memProcName(p) + (g ? ', ' + memGroupName(g) + ': ' + what + ' ' + fmtBytes(peak) : ': peak ' + fmtBytes(p.peak_bytes) + ', ' + fmtBytes(p.allocated_bytes) + ' allocated, ' + fmtBytes(p.live_end_bytes) + ' live at the end')}),
        lineChart([{name: 'live bytes, ' + memProcName(p), t: t, v: v}], {fmt: fmtBytes, marks: p.steps, height: 160,
          bands: g ? [{t0: g[2], t1: g[3], label: memGroupName(g)}] : [],
          points: [{t: at, v: peak, label: label, attrs: {class: 'mem-peak', id: 'mem-peak-' + i, 'data-bytes': peak, 'data-ns': at},
            onclick: g ? null : function () { mem.peakOf = i; render(); var c = document.getElementById('mem-peak-card'); if (c && c.scrollIntoView) c.scrollIntoView(); }}]})]));
    });
    out.push(card('Live bytes (allocations)' + est, [el('p', {class: 'hint', text: 'The bytes the program had allocated and not freed, per process, on the job\'s time axis (the span timeline\'s). ' +
      'The red dot is the peak: click it for what was live then. Dashed lines are step marks; drag to zoom, double-click to reset.'})].concat(charts)));
    if (mem.peakOf >= 0 && mem.peakOf < procs.length) {
      var pp = procs[mem.peakOf];
      out.push(el('div', {class: 'card', id: 'mem-peak-card'}, [el('h2', {text: 'What was live at the peak: ' + memProcName(pp) + ', ' + fmtBytes(pp.peak_bytes) + ' at ' + fmtNs(pp.peak_ns)}),
        el('p', {class: 'hint', text: 'Click a site to show it in the flame graph.'}), memPeakSites(mem.peakOf)]));
    }
    var zones = [[-1, 'every zone']], used = {};
    arr(m.sites).forEach(function (s) { used[s[1]] = 1; });
    Object.keys(used).map(Number).sort(function (a, b) { return memZoneName(a).localeCompare(memZoneName(b)); }).forEach(function (z) { zones.push([z, memZoneName(z)]); });
    /* Steps: the groups of the process chosen, else of the first that has
     * step marks (choosing one chooses that process too). */
    var sp = mem.proc >= 0 ? mem.proc : procs.map(function (p) { return arr(p.step_groups).length > 0; }).indexOf(true);
    var steps = [[-1, 'every step']].concat(sp >= 0 ? arr(procs[sp].step_groups).map(function (g, k) {
      return [k, memGroupName(g) + ' (peak ' + fmtBytes(g[4]) + ')'];
    }) : []);
    var controls = el('div', {class: 'legend'}, [
      el('label', null, ['by ', memSelect('mem-by', mem.by, [['peak', 'bytes live at the peak'], ['alloc', 'bytes allocated']], function (v) { mem.by = v; render(); })]),
      el('label', null, ['process ', memSelect('mem-proc', mem.proc, [[-1, 'every process']].concat(procs.map(function (p, i) { return [i, memProcName(p)]; })), function (v) { mem.proc = Number(v); mem.step = -1; render(); })]),
      el('label', null, ['zone ', memSelect('mem-zone', mem.zone, zones, function (v) { mem.zone = Number(v); render(); })]),
      el('label', null, ['step ', memSelect('mem-step', mem.step, steps, function (v) { mem.step = Number(v); if (mem.step >= 0) mem.proc = sp; render(); })])]);
    var host = el('div', {id: 'mem-flame-box'}), tree = memTree();
    if (tree.value > 0)
      icicle(host, tree, {id: 'mem-flame', title: 'all: ' + fmtBytes(tree.value) + memByText(),
        color: function (n) { return n.name.indexOf('zone ') === 0 ? zoneColor(n.name.slice(5)) : n.name.charAt(0) === '[' ? '#8d6e63' : n.name === '(other sites)' ? '#adb5bd' : '#e8590c'; },
        tip: memTip, mark: memMarked, label: function (n) { return n.name.replace(/^[^\[]*\/(?=[^/]*:\d+ )/, ''); }});
    else host.appendChild(el('p', {class: 'muted', text: 'Nothing' + memByText() + ' in this selection.'}));
    out.push(el('div', {class: 'card', id: 'mem-flame-card'}, [el('h2', {text: 'Memory flame graph (allocation sites)' + est}), controls,
      el('p', {class: 'hint', text: 'Each frame: bytes ' + (mem.by === 'peak' ? 'live at its process\'s peak' : 'allocated over the run') + ' (of one step or group of steps, when chosen) by the allocations made beneath it; zone, then the stack from the outermost frame. Hover for bytes, count and file:line; click to zoom.' +
        (m.other_sites ? ' ' + m.other_sites + ' smaller sites are summed as (other sites).' : '')}), host]));
    var leaks = [];
    arr(m.sites).forEach(function (s, i) { if (s[6] > 0) leaks.push(i); });
    out.push(card('Leaks (allocation sites growing step after step)', leaks.length ? el('table', {id: 'mem-leaks'}, [el('tr', null, ['pid', 'zone', 'per step', 'live at end', 'where', ''].map(function (h, i) {
      return el('th', {class: i === 1 || i === 4 ? 'l' : '', text: h});
    }))].concat(leaks.map(function (i) {
      var s = m.sites[i];
      return el('tr', null, [el('td', {text: memProcName(procs[s[0]]).slice(4)}), el('td', {class: 'l', text: memZoneName(s[1])}), el('td', {text: '+' + fmtBytes(s[6])}),
        el('td', {text: fmtBytes(s[5])}), el('td', {class: 'l mono', text: memSiteWhere(s)}),
        el('td', null, el('a', {href: '#memory', class: 'mem-leak-link', 'data-site': i, text: 'show in flame graph', onclick: function (ev) { ev.preventDefault(); memShowSite(i); }}))]);
    }))) : el('p', {class: 'muted', text: 'No allocation site grows step after step.'})));
    return out;
  }

  function viewMemory() {
    var out = memCards(), leaks = arr(R().leaks);
    out.push(chartCard('RSS per process', named(bySubj('process', 'rss_bytes')), fmtBytes, {bands: leakBands('process')}));
    out.push(chartCard('GPU memory per process', named(bySubj('process', 'gpu_mem_bytes')), fmtBytes));
    out.push(chartCard('GPU memory used per device', named(bySubj('gpu', 'gpu_mem_used_bytes')), fmtBytes, {bands: leakBands('gpu')}));
    out.push(chartCard('System memory used', named(bySubj('system', 'mem_used_bytes')), fmtBytes));
    out.push(card('Leaks (RSS and GPU memory growing)', leaks.length ? el('table', null, [el('tr', null, ['measure', 'subject', 'growth', 'slope', 'from', 'to'].map(function (h) { return el('th', {text: h}); }))].concat(leaks.map(function (l) {
      return el('tr', null, [el('td', {text: l.measure}), el('td', {text: (l.subject || '') + ' ' + (l.id !== undefined ? l.id : '')}),
        el('td', {text: num(l.growth_mb) + ' MB'}), el('td', {text: l.slope_mb_per_min !== undefined ? num(l.slope_mb_per_min) + ' MB/min' : '–'}),
        el('td', {text: fmtNs(l.begin_ns)}), el('td', {text: fmtNs(l.end_ns)})]);
    }))) : el('p', {class: 'muted', text: R().leaks ? 'No memory growth found.' : 'Leak analysis is not in this report.'})));
    return out;
  }

  function viewGpu() {
    var res = R().resources, out = [];
    if (!res) return [card('GPU', el('p', {class: 'muted', text: 'No samples in these profiles.'}))];
    if (!res.gpus) return [card('GPU', el('p', null, ['No GPU sampled: ', el('b', {text: res.gpu_absent || 'no GPU found'})]))];
    arr(res.subjects).filter(function (s) { return s.subject === 'gpu'; }).forEach(function (s) {
      var ms = arr(s.measures);
      var figs = ms.filter(function (m) { return m.count > 0; }).slice(0, 12).map(function (m) { var f = fmtUnit(m.name); return [m.name + ' (mean / max)', f(m.mean) + ' / ' + f(m.max)]; });
      var kids = [figures(figs)];
      ['gpu_util_pct', 'gpu_mem_used_bytes', 'gpu_temp_c', 'gpu_power_w'].forEach(function (mn) {
        var ss = series(function (x) { return x.subject === 'gpu' && x.id === s.id && x.measure === mn && (!s.hostname || x.host === s.hostname); });
        if (ss.length) kids.push(el('div', null, [el('b', {text: mn}), lineChart(ss.map(function (x) { return {name: mn, t: x.t, v: x.v}; }), {fmt: fmtUnit(mn), marks: D.marks, height: 140})]));
      });
      var absent = ms.filter(function (m) { return m.count === 0 && m.absent; });
      if (absent.length) kids.push(el('p', {class: 'muted', text: 'absent: ' + absent.map(function (m) { return m.name + ' (' + m.absent + ')'; }).join(', ')}));
      out.push(card('GPU ' + s.id + (s.label ? ' — ' + s.label : '') + (s.hostname ? ' @ ' + s.hostname : ''), kids));
    });
    return out;
  }

  function viewFindings() {
    var f = findings(), out = [];
    if (f.length) {
      out.push(card('Severity', barChart(f.slice(0, 20).map(function (x) {
        return {name: (x.type || '') + (x.zone ? ' ' + x.zone : ''), value: +x.severity || 0, color: sevColor(+x.severity || 0)};
      }), function (v) { return num(v, 0); })));
    }
    out.push(card('Findings and recommendations', findingsList(f)));
    if (!R().findings) out.push(el('p', {class: 'hint', text: 'This report carries no analysis of findings.'}));
    return out;
  }

  function viewProcesses() {
    var procs = arr(R().processes), kids = {}, roots = [];
    procs.forEach(function (p, i) {
      if (p.parent === null || p.parent === undefined || !procs[p.parent]) roots.push(i); else (kids[p.parent] = kids[p.parent] || []).push(i);
    });
    function item(i) {
      var p = procs[i];
      return el('li', null, [el('b', {text: 'pid ' + p.pid}), ' ', el('span', {class: 'mono', text: p.cmdline || p.exe}),
        el('span', {class: 'muted', text: '  wall ' + fmtNs(p.wall_ns) + ', ' + p.spans + ' spans, ' + p.threads + ' threads' +
          (p.rank !== null && p.rank !== undefined ? ', rank ' + p.rank : '') + (p.clean_end ? '' : ', ended without closing')}),
        (kids[i] || []).length ? el('ul', null, kids[i].map(item)) : null]);
    }
    var wall = R().wall_ns || 1, W = 900, rowH = 18, L = 200;
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + (procs.length * rowH + 24), width: '100%'});
    procs.forEach(function (p, i) {
      var x = L + p.offset_ns / wall * (W - L - 10), w = Math.max(1, p.wall_ns / wall * (W - L - 10));
      g.appendChild(sv('text', {x: L - 6, y: i * rowH + 13, 'text-anchor': 'end', text: ('pid ' + p.pid + ' ' + (p.exe || '')).slice(0, 32)}));
      g.appendChild(titled(sv('rect', {x: x, y: i * rowH + 3, width: w, height: rowH - 6, fill: p.clean_end ? COLORS[0] : COLORS[4], rx: 2}),
        (p.cmdline || p.exe || '') + '\nstart ' + fmtNs(p.offset_ns) + ', wall ' + fmtNs(p.wall_ns)));
    });
    g.appendChild(sv('text', {x: L, y: procs.length * rowH + 18, text: '0'}));
    g.appendChild(sv('text', {x: W - 10, y: procs.length * rowH + 18, 'text-anchor': 'end', text: fmtNs(wall)}));
    /* Tracks as the text report shows them: "track" for a tid, none that
     * holds no span (torch's CUDA allocator history: allocations only). */
    var th = arr(R().threads).filter(function (t) { return !t.track || t.spans || t.dropped; });
    return [card('Process tree', el('div', {class: 'tree'}, el('ul', null, roots.map(item)))),
      card('Process lifetimes on the job timeline', g),
      card('Threads', el('table', null, [el('tr', null, ['pid', 'tid', 'name', 'spans', 'busy', 'steps', 'mean step'].map(function (h) { return el('th', {text: h}); }))].concat(th.map(function (t) {
        return el('tr', null, [el('td', {text: t.pid}), el('td', {text: t.track ? 'track' : t.tid}), el('td', {class: 'name', text: t.name}), el('td', {text: t.spans}), el('td', {text: fmtNs(t.busy_ns)}), el('td', {text: t.steps}), el('td', {text: t.steps > 1 ? fmtNs(t.step_mean_ns) : '–'})]);
      }))))];
  }

  /* Compare: several labelled runs (D.compare, schema mlprof.compare/1),
   * the first of which the other views show. */
  function C() { return D.compare || null; }
  function hasCompare() { return !!(C() && arr(C().runs).length >= 2); }
  function runColor(i) { return COLORS[i % COLORS.length]; }
  /* The run fastest at zone z, or -1 on a tie (another run within noise:
   * z.tie, compare.h's rule) or none. */
  function soleFastest(z) {
    return arr(z.runs)[z.fastest] && !z.tie ? z.fastest : -1;
  }
  function fmtX(x) { return x === null || x === undefined || !isFinite(x) ? '–' : x.toFixed(2) + '×'; }
  /* Zone means grouped by zone, one bar per run (horizontal, so long zone
   * names fit): zones [{name, runs: [stats or null]}]. */
  function groupedBars(zones, runs) {
    var W = 900, L = 220, barH = 12, gap = 10, n = runs.length;
    var groupH = n * barH + gap, H = zones.length * groupH + 8;
    var vmax = 0;
    zones.forEach(function (z) { arr(z.runs).forEach(function (s) { if (s) vmax = Math.max(vmax, s.mean_ns); }); });
    if (vmax <= 0) vmax = 1;
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', class: 'compare-bars'});
    zones.forEach(function (z, k) {
      var y0 = k * groupH + 4;
      g.appendChild(sv('text', {x: L - 6, y: y0 + n * barH / 2 + 4, 'text-anchor': 'end', text: z.name.length > 34 ? z.name.slice(0, 33) + '…' : z.name}));
      runs.forEach(function (r, i) {
        var s = arr(z.runs)[i], y = y0 + i * barH;
        if (!s) {
          g.appendChild(sv('text', {x: L + 2, y: y + barH - 2, class: 'absent', text: 'absent in ' + r.label}));
          return;
        }
        var w = Math.max(1, s.mean_ns / vmax * (W - L - 90));
        g.appendChild(titled(sv('rect', {x: L, y: y + 1, width: w, height: barH - 2, fill: runColor(i), rx: 1}),
          z.name + '\n' + r.label + ': mean ' + fmtNs(s.mean_ns) + ', p50 ' + fmtNs(s.p50_ns) + ', p99 ' + fmtNs(s.p99_ns) +
          '\n' + fmtX(s.speedup_vs_slowest) + ' vs slowest, ' + fmtX(s.speedup_vs_first) + ' vs first'));
        g.appendChild(sv('text', {x: L + w + 4, y: y + barH - 2, text: fmtNs(s.mean_ns) + (soleFastest(z) === i ? ' ★' : '')}));
      });
    });
    var legend = el('div', {class: 'legend'}, runs.map(function (r, i) {
      return el('span', null, [el('i', {style: 'background:' + runColor(i) + ';height:10px'}), r.label]);
    }));
    return el('div', null, [legend, g]);
  }
  function viewCompare() {
    var c = C(), runs = arr(c.runs), zones = arr(c.zones), rk = c.ranking || {};
    var steps = rk.step_basis === 'steps', out = [];
    out.push(card('Recommendation', el('p', {id: 'recommendation', text: c.recommendation || ''})));
    var rhead = el('tr', null, ['#', 'label', 'path', 'wall', 'spans', 'step p50', 'rank wall', 'rank step'].map(function (h) { return el('th', {class: h === 'label' || h === 'path' ? 'l' : '', text: h}); }));
    var rrows = runs.map(function (r, i) {
      var best = c.fastest && c.fastest.run === i;
      return el('tr', null, [el('td', {text: i + 1}), el('td', {class: 'name' + (best ? ' fastest' : ''), text: r.label}),
        el('td', {class: 'name', title: r.path, text: r.path}), el('td', {text: fmtNs(r.wall_ns)}), el('td', {text: r.spans}),
        el('td', {title: r.step_p50_interval_ns ? '95% interval ' + fmtNs(r.step_p50_interval_ns[0]) + ' .. ' + fmtNs(r.step_p50_interval_ns[1]) + '; mean ' + fmtNs(r.step_mean_ns) : '', text: r.step_intervals && r.step_p50_ns != null ? fmtNs(r.step_p50_ns) : '–'}), el('td', {text: r.rank_total}), el('td', {text: r.rank_step})]);
    });
    function ranking(order, what) {
      return el('div', null, [el('b', {text: what}), el('ol', {class: 'ranking'}, arr(order).map(function (i) {
        var r = runs[i] || {};
        return el('li', null, [el('span', {class: 'name', text: r.label}), el('span', {class: 'muted', text: '  ' + (what === 'by wall time' ? fmtNs(r.wall_ns) : fmtNs(r.step_p50_ns))})]);
      }))]);
    }
    out.push(card('Runs (' + runs.length + ')', [el('table', {id: 'compare-runs'}, [el('thead', null, rhead), el('tbody', null, rrows)]),
      el('div', {class: 'rankings'}, [ranking(rk.step, steps ? 'by step time' : 'by wall time (not every run has steps)'), ranking(rk.total, 'by wall time')])]));
    var top = zones.slice(0, 20);
    out.push(card('Mean per zone and run (' + top.length + ' of ' + zones.length + ', largest total first; ★ fastest)', groupedBars(top, runs)));
    out.push(compareDists());
    var h1 = el('tr', null, [el('th', {rowspan: 2, text: 'zone'}), el('th', {rowspan: 2, class: 'l', text: 'fastest'})].concat(runs.map(function (r, i) {
      return el('th', {colspan: 3, class: 'run', style: 'border-top:3px solid ' + runColor(i), text: r.label});
    })));
    var h2 = el('tr', null, [].concat.apply([], runs.map(function () {
      return [el('th', {text: 'mean'}), el('th', {text: 'vs slowest'}), el('th', {text: 'vs first'})];
    })));
    var body = zones.map(function (z) {
      var sole = soleFastest(z);
      var cells = [el('td', {class: 'name', title: z.name, text: z.name}), el('td', {class: 'name', text: sole >= 0 ? (runs[sole] || {}).label : 'tie'})];
      runs.forEach(function (r, i) {
        var s = arr(z.runs)[i], best = sole === i && runs.length > 1;
        if (!s) { cells.push(el('td', {colspan: 3, class: 'muted', text: 'absent'})); return; }
        cells.push(el('td', {class: best ? 'fastest' : '', title: 'count ' + s.count + ', p50 ' + fmtNs(s.p50_ns) + ', p99 ' + fmtNs(s.p99_ns), text: fmtNs(s.mean_ns)}),
          el('td', {class: best ? 'fastest' : '', text: fmtX(s.speedup_vs_slowest)}),
          el('td', {class: best ? 'fastest' : '', text: fmtX(s.speedup_vs_first)}));
      });
      return el('tr', null, cells);
    });
    out.push(card('Zones (speedup = the other run\'s mean / this run\'s mean; > 1 is faster)',
      el('div', {style: 'max-height:520px;overflow:auto'}, el('table', {id: 'compare-zones'}, [el('thead', null, [h1, h2]), el('tbody', null, body)]))));
    var warn = [];
    runs.forEach(function (r) { arr(r.warnings).forEach(function (w) { warn.push(r.label + ': ' + w); }); });
    if (warn.length) out.push(card('Warnings', el('ul', null, warn.map(function (w) { return el('li', {class: 'warn', text: w}); }))));
    return out;
  }

  /* ---- distributions (D.compare_dist, D.diff_dist) ----------------------- */
  /* A zone's distribution: its percentiles 0, 5, ..., 100 (21 values, ns). */
  function distBox(q) {
    return 'p5 ' + fmtNs(q[1]) + ', p25 ' + fmtNs(q[5]) + ', median ' + fmtNs(q[10]) + ', p75 ' + fmtNs(q[15]) +
      ', p95 ' + fmtNs(q[19]) + '\nmin ' + fmtNs(q[0]) + ', max ' + fmtNs(q[20]);
  }
  /* One violin (the density between consecutive percentiles, 5% of the
   * spans each, up to p95) with a box (p25-p75, median) and whiskers
   * (p5-p95) per row
   * on one axis, [min, largest p95]; a row's max beyond it is a mark at the
   * right edge. rows: [{label, color, q}] (q null: absent). */
  function distPlot(rows, title) {
    var W = 900, L = 160, Rm = 60, rowH = 30, T = 4, B = 20, H = T + rows.length * rowH + B;
    var lo = Infinity, hi = 0;
    rows.forEach(function (r) { if (r.q) { lo = Math.min(lo, r.q[0]); hi = Math.max(hi, r.q[19]); } });
    if (!isFinite(lo)) return el('p', {class: 'muted', text: 'no durations'});
    if (hi <= lo) hi = lo + 1;
    hi += (hi - lo) * 0.05;
    function X(v) { return L + (Math.min(v, hi) - lo) / (hi - lo) * (W - L - Rm); }
    var minW = (hi - lo) / 300, dmax = 0;
    function dens(q, i) { return 0.05 / Math.max(minW, q[i + 1] - q[i]); }
    rows.forEach(function (r) { if (r.q) for (var i = 0; i < 19; i++) dmax = Math.max(dmax, dens(r.q, i)); });
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', class: 'dist'});
    if (title) g.appendChild(sv('title', {text: title}));
    ticks(lo, hi, niceStep(hi - lo, 4, true)).forEach(function (v) {
      g.appendChild(sv('line', {x1: X(v), x2: X(v), y1: T, y2: H - B, stroke: '#eef0f4'}));
      g.appendChild(sv('text', {x: X(v), y: H - 6, 'text-anchor': 'middle', class: 'tick x', text: tickText(fmtNs, v)}));
    });
    rows.forEach(function (r, j) {
      var cy = T + j * rowH + rowH / 2, half = rowH / 2 - 2, q = r.q;
      g.appendChild(sv('text', {x: L - 6, y: cy + 4, 'text-anchor': 'end', text: r.label.length > 24 ? r.label.slice(0, 23) + '…' : r.label}));
      if (!q) { g.appendChild(sv('text', {x: L + 2, y: cy + 4, class: 'absent', text: 'absent'})); return; }
      var up = [], down = [];
      for (var i = 0; i < 19; i++) {
        var h = dens(q, i) / dmax * half;
        up.push(X(q[i]).toFixed(1) + ',' + (cy - h).toFixed(1), X(q[i + 1]).toFixed(1) + ',' + (cy - h).toFixed(1));
        down.unshift(X(q[i]).toFixed(1) + ',' + (cy + h).toFixed(1), X(q[i + 1]).toFixed(1) + ',' + (cy + h).toFixed(1));
      }
      var tipText = r.label + '\n' + distBox(q);
      g.appendChild(titled(sv('polygon', {points: up.concat(down).join(' '), fill: r.color, 'fill-opacity': 0.25, stroke: r.color, 'stroke-width': 0.8}), tipText));
      g.appendChild(sv('line', {x1: X(q[1]), x2: X(q[19]), y1: cy, y2: cy, stroke: r.color}));
      g.appendChild(titled(sv('rect', {x: X(q[5]), y: cy - 5, width: Math.max(1, X(q[15]) - X(q[5])), height: 10, fill: '#fff', 'fill-opacity': 0.6, stroke: r.color}), tipText));
      g.appendChild(sv('line', {x1: X(q[10]), x2: X(q[10]), y1: cy - 7, y2: cy + 7, stroke: r.color, 'stroke-width': 2.5, class: 'median'}));
      if (q[20] > hi) g.appendChild(titled(sv('text', {x: W - Rm + 4, y: cy + 4, fill: r.color, text: '▸ ' + fmtNs(q[20])}), 'max ' + fmtNs(q[20]) + ' (beyond the axis)'));
    });
    return g;
  }
  /* Distribution plots of the first n zones: one card of small plots. */
  function distCard(title, zones, n) {
    var kids = zones.slice(0, n).map(function (z) {
      return el('div', {class: 'distz'}, [el('div', {class: 'mono', text: z.name}), distPlot(z.rows, z.name)]);
    });
    return card(title, [el('p', {class: 'hint', text: 'Per zone, each run\'s durations: shaded, the density between consecutive 5% percentiles up to p95; box p25–p75 with the median, whiskers p5–p95; a max beyond the axis is marked ▸. Hover for the figures.'})].concat(kids));
  }
  function compareDists() {
    var runs = arr(C().runs), dist = arr(D.compare_dist);
    return distCard('Distribution per zone and run (first 20)', arr(C().zones).map(function (z, k) {
      return {name: z.name, rows: runs.map(function (r, i) { return {label: r.label, color: runColor(i), q: arr(dist[k])[i] || null}; })};
    }), 20);
  }

  /* Diff: what mlprof diff says of two runs (D.diff, schema mlprof.diff/1)
   * with each side's distribution; the other views show NEW. */
  var VERDICT_COLORS = {slower: 'var(--bad)', faster: 'var(--ok)', 'new': 'var(--acc)', removed: 'var(--warn)', unchanged: 'var(--mut)', machine: 'var(--mut)'};
  /* The verdict a person reads: "machine" for a move the machine explains. */
  function shownVerdict(z) { return z.machine_explains ? 'machine' : z.verdict; }
  function fmtChange(x) { return x === null || x === undefined ? '–' : !isFinite(x) ? '+inf' : (x >= 0 ? '+' : '') + num(100 * x, 1) + '%'; }
  function fmtP(t) { return !t ? '–' : t.p < 1e-300 ? '<1e-300' : t.p.toPrecision(2); }
  function diffNote(z, shift) {
    if (z.machine_explains && z.explained_by === 'load') return 'no more than the machine explains';
    if (z.runs_vary) return 'the runs vary';
    if (shift.detected && z.vs_shift) return z.vs_shift.verdict === 'unchanged' ? 'with the common shift' : fmtChange(z.vs_shift.change) + ' beyond the common shift';
    if (z.verdict === 'new') return 'not in BASE';
    if (z.verdict === 'removed') return 'not in NEW';
    if (z.too_few) return 'too few samples';
    return z.test ? '' : 'no durations';
  }
  /* The functions' self time (D.diff.functions): what the stack samples say
   * made a zone slower. */
  function diffFuncs(fn) {
    var rows = arr(fn.rows), per = fn.per === 'step' ? 'a step' : 'in the run';
    var heads = ['function', 'file:line', 'verdict', 'base', 'new', 'change', 'p'];
    var body = rows.map(function (f) {
      var change = f.ratio === null || f.ratio === undefined ? (f.base_self_ns > 0 ? '–' : '+inf') : fmtChange(f.ratio - 1);
      return el('tr', null, [el('td', {class: 'name', title: f['function'], text: f['function']}),
        el('td', {class: 'l', text: f.file + (f.line ? ':' + f.line : '')}),
        el('td', {class: 'l verdict', style: 'color:' + VERDICT_COLORS[f.verdict] + ';font-weight:600', text: f.verdict + (f.too_few ? ' (too few)' : '')}),
        el('td', {text: fmtNs(f.base_self_ns)}), el('td', {text: fmtNs(f.new_self_ns)}),
        el('td', {text: change}), el('td', {text: f.p === null || f.p === undefined ? '–' : fmtP(f)})]);
    });
    return card('Functions (' + rows.length + '; self time ' + per + ', from the stack samples; change = new / base − 1)',
      el('div', {style: 'max-height:480px;overflow:auto'}, el('table', {id: 'diff-funcs'}, [el('thead', null, el('tr', null, heads.map(function (h, i) {
        return el('th', {class: i === 1 || i === 2 ? 'l' : '', text: h});
      }))), el('tbody', null, body)])));
  }
  function viewDiff() {
    var d = D.diff, zones = arr(d.zones), sm = d.summary || {}, shift = d.uniform_shift || {}, out = [];
    var th = num(100 * d.threshold, 1) + '%';
    var machine = d.machine || {}, moved = zones.filter(function (z) { return z.machine_explains; }).length;
    var verdict = d.regression ? 'REGRESSION: ' + sm.slower + ' zone' + (sm.slower === 1 ? '' : 's') + ' significantly slower by more than ' + th
      : moved ? 'no regression: ' + moved + ' zone' + (moved === 1 ? '' : 's') + ' moved with the machine' : 'no regression';
    out.push(card('Verdict', [el('p', {id: 'diff-verdict', class: d.regression ? 'bad' : '', text: verdict}),
      figures([['base', d.base.path], ['new', d.new.path], ['threshold (ratio of medians)', th], ['alpha (Mann-Whitney U, two-sided)', String(d.alpha)],
        ['min spans a side', String(d.min_count)], ['slower / faster', sm.slower + ' / ' + sm.faster], ['unchanged', String(sm.unchanged)],
        ['new / removed', sm['new'] + ' / ' + sm.removed]]),
      shift.detected ? el('p', {id: 'diff-shift', class: 'warn', text: 'Uniform shift: ' + shift.note}) : null,
      machine.slower ? el('p', {id: 'diff-machine', class: 'warn', text: 'Machine: ' + machine.note}) : null]));
    var heads = ['zone', 'verdict', 'base n', 'new n', 'base p50', 'new p50', 'change', 'p', 'note'];
    var body = zones.map(function (z) {
      return el('tr', null, [el('td', {class: 'name', title: z.name, text: z.name}),
        el('td', {class: 'l verdict', style: 'color:' + VERDICT_COLORS[shownVerdict(z)] + ';font-weight:600', text: shownVerdict(z)}),
        el('td', {text: z.base ? z.base.count : '–'}), el('td', {text: z['new'] ? z['new'].count : '–'}),
        el('td', {text: z.base ? fmtNs(z.base.median_ns) : '–'}), el('td', {text: z['new'] ? fmtNs(z['new'].median_ns) : '–'}),
        el('td', {text: fmtChange(z.change)}), el('td', {title: z.test ? 'U ' + z.test.u + ' (' + z.test.method + '), P(new longer) ' + num(z.test.p_longer) : null, text: fmtP(z.test)}),
        el('td', {class: 'l', text: diffNote(z, shift)})]);
    });
    out.push(card('Zones (' + zones.length + (sm.filtered ? ', ' + sm.filtered + ' left out' : '') + '; change = median NEW / median BASE − 1)',
      el('div', {style: 'max-height:480px;overflow:auto'}, el('table', {id: 'diff-zones'}, [el('thead', null, el('tr', null, heads.map(function (h, i) {
        return el('th', {class: i === 1 || i === 8 ? 'l' : '', text: h});
      }))), el('tbody', null, body)]))));
    var fn = d.functions;
    if (fn) out.push(diffFuncs(fn));
    var dist = arr(D.diff_dist);
    out.push(distCard('Distribution per zone, BASE and NEW (first 30 in this order)', zones.map(function (z, k) {
      var q = arr(dist[k]);
      return {name: z.name + '  ' + shownVerdict(z) + ' ' + fmtChange(z.change), rows: [{label: 'base', color: COLORS[0], q: q[0] || null}, {label: 'new', color: COLORS[1], q: q[1] || null}]};
    }), 30));
    var warn = [];
    [['base', d.base], ['new', d['new']]].forEach(function (r) { arr(r[1].warnings).forEach(function (w) { warn.push(r[0] + ': ' + w); }); });
    if (warn.length) out.push(card('Warnings', el('ul', null, warn.map(function (w) { return el('li', {class: 'warn', text: w}); }))));
    return out;
  }

  /* Layers: the zones of mlprof.torch.profile_model, `PATH (Type):forward`
   * and `:backward` (the model itself `Type:forward`), one row per module,
   * with the modules it hooked from the session metadata mlprof.layers:*
   * (those without a zone never ran). */
  function layerMeta() {
    var out = [];
    arr(R().processes).forEach(function (p) {
      Object.keys(p.meta || {}).forEach(function (k) {
        if (k.indexOf('mlprof.layers:') !== 0) return;
        try { out = out.concat(arr(JSON.parse(p.meta[k]))); } catch (e) { /* not ours: ignore */ }
      });
    });
    return out;
  }
  function layerRows() {
    var meta = layerMeta(), rows = {}, order = [];
    function row(label) {
      if (!rows[label]) { rows[label] = {label: label, fwd: null, bwd: null}; order.push(label); }
      return rows[label];
    }
    meta.forEach(function (m) {
      if (typeof m.zone !== 'string') return;
      var r = row(m.zone);
      r.path = String(m.path === undefined ? '' : m.path); r.type = String(m.type || ''); r.leaf = !!m.leaf;
      r.params = typeof m.params === 'number' ? m.params : null; r.hooked = true;
    });
    arr(R().zones).forEach(function (z) {
      var m = /^(.*):(forward|backward)$/.exec(z.name);
      if (!m) return;
      var pt = /^(.+) \(([^()]+)\)$/.exec(m[1]);
      if (!pt && !rows[m[1]]) return; /* not a layer zone */
      var r = row(m[1]);
      if (!r.hooked) { r.path = pt[1]; r.type = pt[2]; r.params = null; }
      r[m[2] === 'forward' ? 'fwd' : 'bwd'] = z;
    });
    return order.map(function (k) { return rows[k]; });
  }
  function hasLayers() { return layerRows().length > 0; }
  function flopsOf(z) {
    var u = z ? arr(z.units).filter(function (x) { return x.unit === 'flops'; })[0] : null;
    return u ? {perCall: u.n / Math.max(1, z.count), perS: u.per_s} : null;
  }
  function fmtSI(x, unit) {
    if (x === null || x === undefined || !isFinite(x)) return '–';
    var p = ['', 'k', 'M', 'G', 'T', 'P'], i = 0;
    while (Math.abs(x) >= 1000 && i < p.length - 1) { x /= 1000; i++; }
    return num(x) + ' ' + p[i] + unit;
  }
  function viewLayers() {
    var rows = layerRows(), ran = rows.filter(function (r) { return r.fwd; });
    /* Slowest and most variable among the leaves that ran (every module
     * that ran when the profile does not say which are leaves). */
    var pool = ran.filter(function (r) { return r.leaf; });
    if (!pool.length) pool = ran;
    function time(r) { return r.fwd.total_ns + (r.bwd ? r.bwd.total_ns : 0); }
    function cv(r) { return r.fwd.count > 1 && r.fwd.mean_ns > 0 ? r.fwd.std_ns / r.fwd.mean_ns : -1; }
    var slowest = pool.slice().sort(function (a, b) { return time(b) - time(a); })[0];
    var variable = pool.filter(function (r) { return cv(r) >= 0; }).sort(function (a, b) { return cv(b) - cv(a); })[0];
    var never = rows.filter(function (r) { return !r.fwd; });
    var out = [], figs = [['modules', String(rows.length)], ['ran', String(ran.length)], ['never ran', String(never.length)]];
    if (slowest) figs.push(['slowest', slowest.label + ' ' + fmtNs(time(slowest))]);
    if (variable) figs.push(['most variable (forward std / mean)', variable.label + ' ' + num(100 * cv(variable)) + '%']);
    out.push(card('Layers', [figures(figs), el('p', {class: 'hint', text: 'One row per module hooked by mlprof.torch.profile_model: forward and backward time, FLOPs per call and achieved FLOP/s (from the "flops" units of the forward zone), parameters (its children\'s included). Marked: the slowest leaf by forward + backward total, the most variable leaf by forward std / mean; greyed: modules hooked that never ran.'})]));
    var heads = ['module', 'type', 'params', 'fwd n', 'fwd mean', 'fwd p50', 'fwd p99', 'fwd share', 'bwd n', 'bwd mean', 'bwd p50', 'bwd p99', 'bwd share', 'FLOPs/call', 'FLOP/s'];
    var body = rows.map(function (r) {
      var f = flopsOf(r.fwd), cls = !r.fwd ? 'never' : r === slowest ? 'slowest' : r === variable ? 'variable' : '';
      var side = function (z) {
        if (!z) return [el('td', {colspan: 5, class: 'muted', text: r.fwd ? 'no backward zone' : ''})];
        return [el('td', {text: z.count}), el('td', {text: fmtNs(z.mean_ns)}), el('td', {text: fmtNs(z.p50_ns)}), el('td', {text: fmtNs(z.p99_ns)}), el('td', {text: num(100 * z.share) + '%'})];
      };
      var note = !r.fwd ? 'never ran' : [r === slowest ? 'slowest' : '', r === variable ? 'most variable' : ''].filter(Boolean).join(', ');
      var params = r.params === null || r.params === undefined ? '–' : r.params < 1000 ? String(r.params) : fmtSI(r.params, '');
      return el('tr', {class: cls}, [el('td', {class: 'name', title: r.label}, [r.path || r.label, note ? el('span', {class: 'tag', text: note}) : null]),
        el('td', {class: 'l', text: r.type}), el('td', {text: params})].concat(side(r.fwd), r.fwd ? side(r.bwd) : [el('td', {colspan: 5})],
        [el('td', {text: f ? fmtSI(f.perCall, '') : '–'}), el('td', {text: f ? fmtSI(f.perS, 'FLOP/s') : '–'})]));
    });
    out.push(card('Modules (' + rows.length + ', in model order)', el('div', {style: 'max-height:560px;overflow:auto'},
      el('table', {id: 'layers'}, [el('thead', null, el('tr', null, heads.map(function (h, i) { return el('th', {class: i < 2 ? 'l' : '', text: h}); }))), el('tbody', null, body)]))));
    var top = ran.slice().sort(function (a, b) { return time(b) - time(a); }).slice(0, 25);
    if (top.length) out.push(card('Forward and backward mean per call (25 slowest by total)', barChart(top.map(function (r) {
      return {name: r.path || r.label, value: r.fwd.mean_ns + (r.bwd ? r.bwd.mean_ns : 0), color: r === slowest ? 'var(--bad)' : PART_COLORS.forward,
        tip: r.label + '\nforward ' + fmtNs(r.fwd.mean_ns) + ', backward ' + (r.bwd ? fmtNs(r.bwd.mean_ns) : '–')};
    }), fmtNs)));
    return out;
  }

  /* ---- span timeline (canvas) ---------------------------------------------
   * Lanes per process and thread (rank first when known), one row per
   * nesting depth, from the pyramid of the page's data (D.timeline): at each
   * zoom the coarsest level whose resolution is below a pixel. Live, a zoom
   * finer than the page's finest level asks the server for the window
   * (D.timeline_url) and draws its answer. */
  var TL = {v0: null, v1: null, sel: null, detail: null, busy: false, timer: 0,
    decoded: null, src: null, frameMs: [], canvas: null, info: null, note: null, args: null, argsSrc: null};
  var ROW = 14, LANE_HEAD = 16, AXIS = 22, STRIP = 38;

  /* The levels of a timeline JSON object, decoded into typed arrays. */
  function tlDecode(t) {
    return arr(t.levels).map(function (lv) {
      var runs = {};
      arr(lv.items).forEach(function (a) {
        var n = (a.length - 1) / 5, r = {b: new Float64Array(n), e: new Float64Array(n),
          name: new Uint32Array(n), count: new Float64Array(n), busy: new Float64Array(n)};
        var b = 0;
        for (var i = 0; i < n; i++) {
          var k = 1 + 5 * i;
          b += a[k];
          r.b[i] = b; r.e[i] = b + a[k + 1]; r.name[i] = a[k + 2]; r.count[i] = a[k + 3]; r.busy[i] = a[k + 4];
        }
        runs[a[0]] = r;
      });
      return {res: lv.res, exact: !!lv.exact, runs: runs, names: arr(t.names)};
    });
  }
  function tlData() {
    if (TL.src !== D.timeline) { TL.src = D.timeline; TL.decoded = D.timeline ? tlDecode(D.timeline) : []; }
    return TL.decoded;
  }
  /* Lanes: [{label, tracks: [track index by depth]}], ordered by rank, pid, tid. */
  function tlLanes() {
    var t = D.timeline, names = arr(t.names), lanes = {}, list = [];
    arr(t.tracks).forEach(function (x, i) {
      var key = x[0] + '/' + x[3], l = lanes[key];
      if (!l) {
        l = lanes[key] = {rank: x[1], pid: x[0], tid: x[3], tracks: [],
          label: (x[1] >= 0 ? 'rank ' + x[1] + ' · ' : '') + names[x[2]] + ' ' + x[0] + ' · thread ' + (names[x[4]] || '') + ' ' + x[3]};
        list.push(l);
      }
      l.tracks[x[5]] = i;
    });
    stLanes(list);
    list.sort(function (a, b) { return (a.rank - b.rank) || (a.pid - b.pid) || (a.tid - b.tid); });
    var y = AXIS;
    list.forEach(function (l) { l.y = y; y += LANE_HEAD + l.tracks.length * ROW + 4 + stLaneH(l); });
    return {list: list, h: y};
  }
  function tlExtent() {
    var lv = tlData(), t1 = R().wall_ns || 0;
    if (lv.length) Object.keys(lv[0].runs).forEach(function (k) { var r = lv[0].runs[k]; if (r.e.length) t1 = Math.max(t1, r.e[r.e.length - 1]); });
    return [0, Math.max(t1, 1)];
  }
  /* The level to draw [v0, v1] with at nsPx ns a pixel: the coarsest below a
   * pixel, else the finest, from the page's levels and the server's answer
   * when it covers the view. */
  function tlLevel(v0, v1, nsPx) {
    var cand = tlData().slice();
    var d = TL.detail;
    if (d && d.t0 <= v0 && d.t1 >= v1) cand = cand.concat(d.levels);
    cand.sort(function (a, b) { return b.res - a.res; });
    var best = cand[cand.length - 1] || null;
    for (var i = 0; i < cand.length; i++) if (cand[i].res <= nsPx || cand[i].exact) { best = cand[i]; break; }
    return best;
  }
  function tlFirst(r, t) { /* first item ending after t */
    var lo = 0, hi = r.e.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (r.e[m] > t) hi = m; else lo = m + 1; }
    return lo;
  }
  /* Calls fn(lane, depth, run, i) for every item of the view. */
  function tlEach(lanes, lv, v0, v1, fn) {
    if (!lv) return;
    lanes.list.forEach(function (l) {
      l.tracks.forEach(function (ti, depth) {
        var r = lv.runs[ti];
        if (!r) return;
        for (var i = tlFirst(r, v0); i < r.b.length && r.b[i] < v1; i++) fn(l, depth, r, i);
      });
    });
  }
  function tlSeries() {
    var want = ['cpu_pct', 'rss_bytes', 'gpu_util_pct', 'cpu_user_pct'];
    return memSeries().slice(0, 2).concat(series(function (s) { return s.subject === 'counter' || want.indexOf(s.measure) >= 0; })).slice(0, 6);
  }
  function tlDraw() {
    var c = TL.canvas;
    if (!c || !c.isConnected || !D.timeline) return;
    var start = performance.now();
    var W = c.parentNode.clientWidth || 1100, lanes = tlLanes(), ser = tlSeries();
    var H = Math.min(lanes.h + ser.length * STRIP + 4, 6000), dpr = window.devicePixelRatio || 1;
    if (c.width !== Math.round(W * dpr) || c.height !== Math.round(H * dpr)) {
      c.width = Math.round(W * dpr); c.height = Math.round(H * dpr);
      c.style.width = W + 'px'; c.style.height = H + 'px';
    }
    var g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    g.font = '11px system-ui,sans-serif';
    g.textBaseline = 'middle';
    var v0 = TL.v0, v1 = TL.v1, nsPx = (v1 - v0) / W;
    function X(t) { return (t - v0) / nsPx; }
    /* axis */
    g.fillStyle = '#4a5263'; g.strokeStyle = '#e3e6eb';
    ticks(v0, v1, niceStep(v1 - v0, W / 110, true)).forEach(function (t) {
      g.beginPath(); g.moveTo(X(t) + 0.5, AXIS - 4); g.lineTo(X(t) + 0.5, H); g.stroke();
      g.fillText(tickText(fmtNs, t), X(t) + 3, 8);
    });
    /* step marks */
    g.strokeStyle = '#9aa1ad'; g.setLineDash([4, 3]);
    arr(D.marks).forEach(function (m) { if (m >= v0 && m <= v1) { g.beginPath(); g.moveTo(X(m) + 0.5, AXIS); g.lineTo(X(m) + 0.5, H); g.stroke(); } });
    g.setLineDash([]);
    lanes.list.forEach(function (l) { g.fillStyle = '#1d2330'; g.fillText(l.label, 4, l.y + LANE_HEAD / 2); });
    var lv = tlLevel(v0, v1, nsPx), names = lv ? lv.names : [], drawn = 0, merged = 0;
    tlEach(lanes, lv, v0, v1, function (l, depth, r, i) {
      var x = Math.max(X(r.b[i]), -1), w = Math.max(X(r.e[i]) - x, 1), y = l.y + LANE_HEAD + depth * ROW;
      var name = names[r.name[i]] || '', sel = TL.sel && TL.sel.r === r && TL.sel.i === i;
      g.globalAlpha = r.count[i] > 1 ? 0.55 : 1;
      g.fillStyle = sel ? '#1d2330' : zoneColor(name);
      g.fillRect(x, y, Math.min(w, W + 2), ROW - 1);
      g.globalAlpha = 1;
      if (w > 40) {
        g.fillStyle = '#fff';
        g.fillText((r.count[i] > 1 ? r.count[i] + '× ' : '') + name, Math.max(x, 0) + 3, y + ROW / 2, Math.min(w, W) - 6);
      }
      drawn++;
      if (r.count[i] > 1) merged++;
    });
    c.setAttribute('data-samples', stDrawMarks(g, lanes, v0, v1, nsPx, X, W));
    /* sampled series beneath, on the same time axis */
    var y0 = lanes.h;
    ser.forEach(function (s, k) {
      var y = y0 + k * STRIP, vmax = 0, fmt = fmtUnit(s.measure);
      s.v.forEach(function (v) { if (v > vmax) vmax = v; });
      g.strokeStyle = COLORS[k % COLORS.length]; g.beginPath();
      var on = false;
      for (var i = 0; i < s.t.length; i++) {
        var px = X(s.t[i]), py = y + STRIP - 4 - (vmax > 0 ? s.v[i] / vmax : 0) * (STRIP - 12);
        if (on) g.lineTo(px, py); else { g.moveTo(px, py); on = true; }
      }
      g.stroke();
      if (s.peak_ns !== undefined && s.peak_ns >= v0 && s.peak_ns <= v1) {
        /* the allocations' peak: a red tick */
        g.fillStyle = '#c8372d';
        g.fillRect(X(s.peak_ns) - 1, y + 2, 3, STRIP - 6);
      }
      g.fillStyle = '#4a5263';
      g.fillText(subjectName(s) + ' ' + s.measure + ' (max ' + fmt(vmax) + ')', 4, y + 6);
    });
    c.setAttribute('data-res', lv ? lv.res : 0);
    c.setAttribute('data-drawn', drawn);
    tlNote(lv, nsPx, merged);
    TL.frameMs.push(performance.now() - start);
    if (TL.frameMs.length > 600) TL.frameMs.shift();
    tlAsk(lv, nsPx);
  }
  /* Says when some of the spans drawn (merged of them) stay merged at a
   * level coarser than a pixel: live, when the server's answer for the view
   * was coarser than asked (the window held too much to read again: a
   * narrower one has every span); a static page has no finer level. */
  function tlNote(lv, nsPx, merged) {
    var px = Math.max(nsPx, 1), d = TL.detail, text = '';
    if (lv && merged && lv.res > Math.max(px, 1000)) {
      if (!D.timeline_url) text = 'merged at ' + fmtNs(lv.res) + ': this page holds no finer level; mlprof serve shows every span';
      else if (d && d.coarser && d.t0 <= TL.v0 && d.t1 >= TL.v1 && d.want <= px) text = 'merged at ' + fmtNs(lv.res) + ': zoom in for every span';
    }
    if (TL.note && TL.note.textContent !== text) TL.note.textContent = text;
  }
  function tlRedraw() {
    if (TL.frame) return;
    TL.frame = requestAnimationFrame(function () { TL.frame = 0; tlDraw(); tlInfo(); });
  }
  /* Live: asks the server for the view (and as much again each side) when
   * the best level at hand is coarser than a pixel. One question at a time,
   * at most one each 80 ms, for the view as it is when asked: while the view
   * moves, each answer is drawn and the next one asked for where it went. */
  function tlAsk(lv, nsPx) {
    if (!D.timeline_url || !lv || lv.exact || lv.res <= Math.max(nsPx, 1)) return;
    var d = TL.detail;
    if (d && d.t0 <= TL.v0 && d.t1 >= TL.v1 && d.want <= Math.max(nsPx, 1)) return;
    if (TL.timer || TL.busy) return;
    TL.timer = setTimeout(function () {
      TL.timer = 0;
      TL.busy = true;
      var w = TL.v1 - TL.v0, t0 = Math.max(0, Math.floor(TL.v0 - w)), t1 = Math.ceil(TL.v1 + w);
      var res = Math.max(1, Math.floor(w / (TL.canvas.clientWidth || 1)));
      fetch(D.timeline_url + '?t0=' + t0 + '&t1=' + t1 + '&res=' + res, {cache: 'no-store'}).then(function (resp) {
        if (!resp.ok) throw new Error('HTTP ' + resp.status);
        return resp.json();
      }).then(function (t) {
        TL.busy = false;
        TL.detail = {t0: t0, t1: t1, want: res, coarser: !!t.coarser, levels: tlDecode(t)};
        tlRedraw();
      }).catch(function (e) { TL.busy = false; if (window.console) console.warn('timeline: ' + e.message); });
    }, 80);
  }
  /* The item at canvas point (x, y), or null. */
  function tlHit(x, y) {
    var W = TL.canvas.clientWidth, nsPx = (TL.v1 - TL.v0) / W, t = TL.v0 + x * nsPx, lanes = tlLanes(), hit = null;
    var sample = stHit(lanes, x, y, TL.v0, nsPx);
    if (sample) return sample;
    var lv = tlLevel(TL.v0, TL.v1, nsPx);
    tlEach(lanes, lv, t - 2 * nsPx, t + 2 * nsPx, function (l, depth, r, i) {
      var ty = l.y + LANE_HEAD + depth * ROW;
      if (y >= ty && y < ty + ROW) hit = {r: r, i: i, lane: l, depth: depth, lv: lv};
    });
    return hit;
  }
  function tlInfo() {
    var box = TL.info, s = TL.sel;
    if (!box) return;
    while (box.firstChild) box.removeChild(box.firstChild);
    if (!s) { box.appendChild(el('p', {class: 'muted', text: 'Click a span for its details.'})); return; }
    if (s.sample) { stSampleInfo(box, s.sample); return; }
    var r = s.r, i = s.i, name = s.lv.names[r.name[i]] || '', dur = r.e[i] - r.b[i], self = r.busy[i];
    var kids = s.lv.runs[s.lane.tracks[s.depth + 1]];
    if (kids && r.count[i] === 1) for (var k = tlFirst(kids, r.b[i]); k < kids.b.length && kids.b[k] < r.e[i]; k++) self -= kids.busy[k];
    var rows = [['zone', name], ['begin', fmtNs(r.b[i])], ['duration', fmtNs(dur)], ['where', s.lane.label + ' · depth ' + s.depth]];
    var more = s.more;
    if (r.count[i] > 1) rows.push(['merged', r.count[i] + ' spans shorter than ' + fmtNs(s.lv.res) + ', ' + fmtNs(r.busy[i]) + ' busy; zoom in to see them']);
    else {
      rows.push(['self', fmtNs(Math.max(more && more.self_ns !== undefined ? more.self_ns : self, 0))]);
      if (!more || typeof more === 'string') rows.push(['metadata', more || 'asking the server…']);
      else {
        var a = more.args;
        arr(a[0]).forEach(function (m) { rows.push([m[0], m[1]]); });
        arr(a[1]).forEach(function (u) { rows.push([u[0] + ' (units)', u[1] >= 1e4 ? u[1] + ' = ' + fmtSI(u[1], '') : String(u[1])]); });
        if (!arr(a[0]).length && !arr(a[1]).length) rows.push(['metadata', 'none']);
        if (more.args_missed) rows.push(['note', more.args_missed + ' metadata entries and units of the run were not kept (too many); this span may lack some']);
      }
    }
    box.appendChild(el('table', {id: 'span-detail'}, rows.map(function (x) { return el('tr', null, [el('td', {text: x[0]}), el('td', {class: 'name', text: x[1]})]); })));
  }
  /* Calls done with the metadata and units of track's span [b, e]: {args:
   * [[[key, value]...], [[unit, n]...]], args_missed, self_ns (live)}, or a
   * sentence saying why there are none. Live, the server answers
   * (D.span_url); a static page has them embedded (D.timeline.args) when
   * they fit its budget. */
  function tlArgs(track, b, e, done) {
    if (D.span_url) {
      fetch(D.span_url + '?track=' + track + '&t0=' + b + '&t1=' + e, {cache: 'no-store'}).then(function (resp) {
        if (!resp.ok) throw new Error('HTTP ' + resp.status);
        return resp.json();
      }).then(done, function (err) { done('cannot ask the server: ' + err.message); });
      return;
    }
    var a = D.timeline.args;
    if (a === null) { done('too many to embed in this page: open the run with mlprof serve for metadata'); return; }
    if (TL.argsSrc !== a) {
      TL.argsSrc = a; TL.args = {};
      arr(a).forEach(function (x) { TL.args[x[0] + ':' + x[1] + ':' + x[2]] = x.slice(3); });
    }
    done({args: TL.args[track + ':' + b + ':' + e] || [[], []], args_missed: D.timeline.args_missed || 0});
  }
  function tlZoom(f, at) {
    var w = TL.v1 - TL.v0, nw = Math.max(w * f, 1000);
    var full = tlExtent();
    nw = Math.min(nw, (full[1] - full[0]) * 1.05);
    TL.v0 = at - (at - TL.v0) * nw / w; TL.v1 = TL.v0 + nw;
    tlRedraw();
  }
  function tlPan(dt) { TL.v0 += dt; TL.v1 += dt; tlRedraw(); }
  function viewSpans() {
    if (!D.timeline) return [card('Spans', el('p', {class: 'muted', text: 'This page holds no span timeline.'}))];
    if (TL.v0 === null) { var e = tlExtent(); TL.v0 = e[0]; TL.v1 = e[1]; }
    var c = el('canvas', {id: 'span-canvas', tabindex: 0, class: 'spans'});
    TL.canvas = c;
    TL.info = el('div', {id: 'span-info'});
    TL.note = el('p', {id: 'span-note', class: 'muted'});
    var drag = null, moved = false;
    c.addEventListener('wheel', function (ev) {
      ev.preventDefault();
      var x = ev.offsetX, at = TL.v0 + x * (TL.v1 - TL.v0) / c.clientWidth;
      tlZoom(Math.pow(1.2, ev.deltaY / 100), at);
    }, {passive: false});
    c.addEventListener('mousedown', function (ev) { drag = ev.clientX; moved = false; c.focus(); });
    window.addEventListener('mouseup', function () { drag = null; });
    c.addEventListener('mousemove', function (ev) {
      if (drag === null) return;
      var dx = ev.clientX - drag;
      if (Math.abs(dx) > 2) moved = true;
      drag = ev.clientX;
      tlPan(-dx * (TL.v1 - TL.v0) / c.clientWidth);
    });
    c.addEventListener('click', function (ev) {
      if (moved) return;
      var sel = TL.sel = tlHit(ev.offsetX, ev.offsetY);
      if (sel && sel.r && sel.r.count[sel.i] === 1)
        tlArgs(sel.lane.tracks[sel.depth], sel.r.b[sel.i], sel.r.e[sel.i], function (x) { sel.more = x; if (TL.sel === sel) tlInfo(); });
      tlRedraw();
    });
    c.addEventListener('keydown', function (ev) {
      var w = TL.v1 - TL.v0, mid = (TL.v0 + TL.v1) / 2, k = ev.key;
      if (k === 'ArrowLeft' || k === 'a') tlPan(-w / 10);
      else if (k === 'ArrowRight' || k === 'd') tlPan(w / 10);
      else if (k === 'ArrowUp' || k === 'w' || k === '+' || k === '=') tlZoom(0.8, mid);
      else if (k === 'ArrowDown' || k === 's' || k === '-') tlZoom(1.25, mid);
      else if (k === '0' || k === 'Home') { var e = tlExtent(); TL.v0 = e[0]; TL.v1 = e[1]; tlRedraw(); }
      else if (k === 'Escape') { TL.sel = null; tlRedraw(); }
      else return;
      ev.preventDefault();
    });
    tlRedraw();
    return [card('Spans', [el('p', {class: 'hint', text: 'Wheel or W/S (↑/↓) to zoom, drag or A/D (←/→) to pan, 0 to see all; click a span for its details. ' +
      'Pale bars merge spans shorter than a pixel.' + (D.timeline_url ? ' Zoomed in, the server sends every span of the window.' : '')}),
      stLaneToggle(), el('div', {class: 'spans-box'}, c), TL.note]), card('Span', TL.info)];
  }
  /* For the browser tests: set the view, read what the last frame drew. */
  window.mlprofTimeline = {
    view: function () { return [TL.v0, TL.v1]; },
    setView: function (a, b) { TL.v0 = a; TL.v1 = b; tlRedraw(); },
    frameMs: function () { return TL.frameMs.slice(); },
    drawn: function () {
      var W = TL.canvas ? TL.canvas.clientWidth : 1, out = [], lv = tlLevel(TL.v0, TL.v1, (TL.v1 - TL.v0) / W);
      tlEach(tlLanes(), lv, TL.v0, TL.v1, function (l, depth, r, i) {
        out.push({name: lv.names[r.name[i]], begin: r.b[i], end: r.e[i], count: r.count[i], pid: l.pid, tid: l.tid, depth: depth,
          track: l.tracks[depth], y: l.y + LANE_HEAD + depth * ROW + ROW / 2});
      });
      return {res: lv ? lv.res : 0, items: out};
    }
  };

  /* ---- stack samples (D.stacks) ---------------------------------------------
   * The Stacks view: an icicle of the sampled stacks (outermost on top), the
   * frames of one function merged at each depth, in CPU time (the samples
   * taken on a CPU) or wall time (all of them), filtered by the zone each
   * sample fell in (the innermost open on its thread), steps, process,
   * thread and rank; a click on a frame zooms into it. And the samples on the
   * span timeline: a thin strip under each thread's lane, a tick per sample
   * (dark: on a CPU), toggled by a check box; a click on one shows its stack.
   * Kept apart from the rest: every name here starts with st. */
  var ST = {src: null, dec: null, mode: 'cpu', zone: -2, proc: -1, thread: -1, rank: 'all', steps: '',
    zoom: [], lane: true, marksSrc: null, marks: null, flame: null};
  var ST_STRIP = 7;
  var ST_COLORS = ['#e8590c', '#f08c00', '#d9480f', '#f59f00', '#e67700', '#fa5252', '#fab005', '#ff922b', '#ffa94d', '#fcc419'];

  function stData() { return D.stacks || null; }
  function hasStacks() { var s = stData(); return !!(s && s.samples > 0); }
  /* The page's stacks decoded once per data: funcs, nodes and each node's
   * path of function keys from the outermost frame. */
  function stDecoded() {
    var s = stData();
    if (ST.src === s) return ST.dec;
    ST.src = s;
    var files = arr(s.files), f = arr(s.funcs), n = arr(s.nodes), funcs = [], nodes = [];
    for (var i = 0; i + 2 < f.length; i += 3) funcs.push({file: f[i] >= 0 ? files[f[i]] : '', name: f[i + 1], first: f[i + 2]});
    for (var k = 0; k + 2 < n.length; k += 3) nodes.push({parent: n[k], func: n[k + 1], line: n[k + 2]});
    var rows = [], r = arr(s.rows);
    for (var j = 0; j + 7 < r.length; j += 8)
      rows.push({node: r[j], zone: r[j + 1], thread: r[j + 2], step: r[j + 3], n: r[j + 4], nCpu: r[j + 5], wall: r[j + 6], cpu: r[j + 7]});
    ST.dec = {funcs: funcs, nodes: nodes, rows: rows, paths: {}, zones: arr(s.zones), procs: arr(s.procs), threads: arr(s.threads)};
    return ST.dec;
  }
  /* Node i's frames from the outermost: [node...]; [] for no Python frame. */
  function stPath(d, i) {
    if (i < 0) return [];
    var p = d.paths[i];
    if (p) return p;
    p = [];
    for (var k = i, guard = 0; k >= 0 && guard < 100000; k = d.nodes[k].parent, guard++) p.push(k);
    p.reverse();
    d.paths[i] = p;
    return p;
  }
  function stFuncLabel(d, f) { return f < 0 ? '(no Python frame)' : d.funcs[f].name; }
  function stWhere(d, f, line) {
    if (f < 0) return '';
    var fn = d.funcs[f];
    return fn.file + (line > 0 ? ':' + line : fn.first > 0 ? ':' + fn.first : '');
  }
  /* The steps field: {a, b} (b exclusive, Infinity: to the end), null for
   * every sample, or a string saying what is wrong. Like --steps A:B; a
   * lone N is step N. */
  function stSteps(text) {
    var t = String(text || '').trim(), m;
    if (!t) return null;
    if ((m = /^(\d+)$/.exec(t))) return {a: +m[1], b: +m[1] + 1};
    if ((m = /^(\d*):(\d*)$/.exec(t))) {
      var a = m[1] === '' ? 0 : +m[1], b = m[2] === '' ? Infinity : +m[2];
      return b > a ? {a: a, b: b} : 'steps A:B wants A < B';
    }
    return 'steps: N, A:B, A: or :B';
  }
  function stRankOf(d, th) { var p = d.procs[d.threads[th][0]]; return p ? p[1] : -1; }
  /* Whether row r passes the filters (st: the parsed steps). */
  function stKeep(d, r, st, width) {
    if (ST.zone !== -2 && r.zone !== ST.zone) return false;
    if (ST.thread >= 0 && r.thread !== ST.thread) return false;
    var th = d.threads[r.thread];
    if (ST.proc >= 0 && th[0] !== ST.proc) return false;
    if (ST.rank !== 'all' && stRankOf(d, r.thread) !== +ST.rank) return false;
    if (st && typeof st === 'object') {
      if (r.step < 0) return false;
      /* A bucket holds steps [step * width, (step + 1) * width). */
      var lo = r.step * width, hi = lo + width;
      if (hi <= st.a || lo >= st.b) return false;
    }
    return true;
  }
  /* The icicle of the rows kept: nodes {key, func, name, value (the total
   * time), self, n, lines, kids (by key), children}, merged by function
   * under each parent; and per function its self and total (once per sample
   * however deep the recursion). */
  function stTree(d) {
    var s = stData(), st = stSteps(ST.steps), width = s.step_width || 1, cpu = ST.mode === 'cpu';
    var root = {key: 'all', func: -2, name: 'all', value: 0, self: 0, n: 0, lines: {}, kids: {}, children: []}, funcs = {};
    d.rows.forEach(function (r) {
      if (!stKeep(d, r, st, width)) return;
      var w = cpu ? r.cpu : r.wall, n = cpu ? r.nCpu : r.n;
      if (w <= 0) return;
      var path = stPath(d, r.node), cur = root, seen = {};
      root.value += w; root.n += n;
      var steps = path.length ? path : [-1];
      steps.forEach(function (nd, k) {
        var f = nd < 0 ? -1 : d.nodes[nd].func, line = nd < 0 ? 0 : d.nodes[nd].line, key = String(f);
        var c = cur.kids[key];
        if (!c) {
          c = cur.kids[key] = {key: key, func: f, name: stFuncLabel(d, f), value: 0, self: 0, n: 0, lines: {}, kids: {}, children: []};
          cur.children.push(c);
        }
        c.value += w; c.n += n;
        c.lines[line] = (c.lines[line] || 0) + w;
        var g = funcs[key] || (funcs[key] = {func: f, self: 0, total: 0, lines: {}});
        if (!seen[key]) { seen[key] = 1; g.total += w; }
        if (k === steps.length - 1) { c.self += w; g.self += w; g.lines[line] = (g.lines[line] || 0) + w; }
        cur = c;
      });
    });
    return {root: root, funcs: funcs, steps: st};
  }
  function stMainLine(lines) {
    var best = 0, bw = -1;
    Object.keys(lines).forEach(function (l) { if (lines[l] > bw) { bw = lines[l]; best = +l; } });
    return best;
  }
  function stColor(d, f) {
    if (f < 0) return '#adb5bd';
    /* By function (and file): neighbours differ, a function keeps its
     * colour wherever it is. */
    var s = d.funcs[f].name + '\n' + d.funcs[f].file, h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0;
    return ST_COLORS[h % ST_COLORS.length];
  }
  function stNodeWhere(d, n) { return stWhere(d, n.func, stMainLine(n.lines)); }
  /* The flame graph, through icicle: zoomed on ST.zoom (the path of keys
   * from the top), dropped when the filters leave no such frame. */
  function stFlame(d, t) {
    var root = t.root, at = root;
    for (var i = 0; i < ST.zoom.length && at; i++) at = at.kids[ST.zoom[i]];
    if (!at) { ST.zoom = []; at = root; }
    var host = el('div', {id: 'st-flame-box'});
    ST.flame = icicle(host, root, {id: 'st-flame', width: 1100, maxDepth: 300, root: at === root ? null : at,
      title: 'all: ' + fmtNs(root.value),
      color: function (n) { return stColor(d, n.func); },
      tip: function (n, total, top) {
        var where = stNodeWhere(d, n);
        return n.name + (where ? '\n' + where : '') + '\ntotal ' + fmtNs(n.value) + ' (' + num(100 * n.value / (root.value || 1)) + '% of the selection' +
          (top !== root ? ', ' + num(100 * n.value / (total || 1)) + '% of ' + top.name : '') + ')' +
          '\nself ' + fmtNs(n.self) + ' (' + num(100 * n.self / (root.value || 1)) + '%)\n' + n.n + ' samples';
      },
      onzoom: function (n) {
        ST.zoom = [];
        for (var x = n; x && x !== root; x = x.parent) ST.zoom.unshift(x.key);
      }});
    return host;
  }
  function stSelect(id, value, options, onchange) {
    var s = el('select', {id: id, onchange: function () { onchange(s.value); render(); }},
      options.map(function (o) { return el('option', {value: o[0], text: o[1]}); }));
    s.value = String(value);
    return s;
  }
  function stControls(d) {
    var s = stData(), zw = {};
    d.rows.forEach(function (r) { zw[r.zone] = (zw[r.zone] || 0) + r.wall; });
    var zones = Object.keys(zw).map(Number).sort(function (a, b) { return zw[b] - zw[a]; });
    var modes = [['cpu', 'CPU time'], ['wall', 'wall time']].map(function (m) {
      var b = el('input', {type: 'radio', name: 'st-mode', id: 'st-mode-' + m[0], value: m[0], onchange: function () { ST.mode = m[0]; render(); }});
      b.checked = ST.mode === m[0];
      return el('label', null, [b, ' ' + m[1]]);
    });
    var kids = modes.concat([
      stSelect('st-zone', ST.zone, [['-2', 'every zone']].concat(zones.map(function (z) { return [String(z), z === 0 ? '(no zone)' : d.zones[z]]; })),
        function (v) { ST.zone = +v; ST.zoom = []; }),
      stSelect('st-proc', ST.proc, [['-1', 'every process']].concat(d.procs.map(function (p, i) { return [String(i), p[2] + ' ' + p[0] + (p[1] >= 0 ? ' (rank ' + p[1] + ')' : '')]; })),
        function (v) { ST.proc = +v; ST.thread = -1; ST.zoom = []; }),
      stSelect('st-thread', ST.thread, [['-1', 'every thread']].concat(d.threads.map(function (t, i) { return [i, t]; }).filter(function (x) { return ST.proc < 0 || x[1][0] === ST.proc; }).map(function (x) {
        return [String(x[0]), (x[1][2] || 'thread') + ' ' + x[1][1] + (ST.proc < 0 && d.procs.length > 1 ? ' (' + d.procs[x[1][0]][0] + ')' : '')];
      })), function (v) { ST.thread = +v; ST.zoom = []; })]);
    var ranks = {};
    d.procs.forEach(function (p) { if (p[1] >= 0) ranks[p[1]] = 1; });
    var rl = Object.keys(ranks).map(Number).sort(function (a, b) { return a - b; });
    if (rl.length) kids.push(stSelect('st-rank', ST.rank, [['all', 'every rank']].concat(rl.map(function (r) { return [String(r), 'rank ' + r]; })), function (v) { ST.rank = v; ST.zoom = []; }));
    var steps = el('input', {id: 'st-steps', type: 'text', size: 9, placeholder: 'steps A:B', value: ST.steps,
      onchange: function () { ST.steps = steps.value; ST.zoom = []; render(); }});
    kids.push(el('label', null, ['steps ', steps]));
    var w = s.step_width || 1;
    kids.push(el('span', {class: 'hint', text: s.steps ? s.steps + ' steps, from 0' + (w > 1 ? '; grouped by ' + w + ' in this page' : '') : 'no step marks'}));
    return el('div', {class: 'st-controls'}, kids);
  }
  /* What the caps left out or merged, in words. */
  function stNotes(s) {
    var out = [];
    if (s.merged) out.push(s.merged + ' samples (' + fmtNs(s.merged_ns) + ') had stacks deeper than the ' + s.nodes_cap + ' largest frames kept: their time is in the caller kept');
    if (s.dropped) out.push(s.dropped + ' samples (' + fmtNs(s.dropped_ns) + ') in the smallest groups were left out (too many zone, thread and step groups)');
    if ((s.step_width || 1) > 1) out.push('steps are grouped by ' + s.step_width + ': a step range is widened to whole groups');
    if (s.unresolved) out.push(s.unresolved + ' samples named a stack the profile never defined');
    return out;
  }
  function stTop(d, t) {
    var all = t.root.value || 1;
    var list = Object.keys(t.funcs).map(function (k) { return t.funcs[k]; }).sort(function (a, b) { return b.self - a.self || b.total - a.total; }).slice(0, 15);
    return el('table', {id: 'st-top'}, [el('thead', null, el('tr', null, ['function', 'where', 'self', 'self %', 'total', 'total %'].map(function (h, i) { return el('th', {class: i < 2 ? 'l' : '', text: h}); }))),
      el('tbody', null, list.map(function (g) {
        return el('tr', null, [el('td', {class: 'name', text: stFuncLabel(d, g.func)}), el('td', {class: 'name', text: stWhere(d, g.func, stMainLine(g.lines))}),
          el('td', {text: fmtNs(g.self)}), el('td', {text: num(100 * g.self / all) + '%'}), el('td', {text: fmtNs(g.total)}), el('td', {text: num(100 * g.total / all) + '%'})]);
      }))]);
  }
  function viewStacks() {
    var s = stData();
    if (!hasStacks()) return [card('Stacks', el('p', {class: 'muted', text: 'This run has no stack samples (mlprof run samples Python processes at 100 Hz; --stacks off switches it off).'}))];
    var d = stDecoded(), t = stTree(d), cpu = ST.mode === 'cpu';
    var head = s.samples + ' samples at ' + (s.interval_ns ? num(1e9 / s.interval_ns, 0) + ' Hz' : '?') + '; shown: ' + fmtNs(t.root.value) +
      (cpu ? ' on a CPU' : ' of wall time (on a CPU or waiting)') + ' in ' + t.root.n + ' samples';
    var kids = [stControls(d), el('p', {class: 'hint', id: 'st-summary', text: head})];
    if (typeof t.steps === 'string') kids.push(el('p', {class: 'bad', text: t.steps}));
    ST.flame = null;
    kids.push(t.root.value > 0 ? stFlame(d, t) : el('p', {class: 'muted', id: 'st-empty', text: 'No sample matches these filters' + (cpu ? ' on a CPU (wall time shows those waiting)' : '') + '.'}));
    kids.push(el('p', {class: 'hint', text: 'Width is time; outermost frame on top, callees below, widest first. Hover a frame for its self and total time; click it to zoom in, click the top bar to zoom out.'}));
    var notes = stNotes(s);
    if (notes.length) kids.push(el('ul', {class: 'hint', id: 'st-notes'}, notes.map(function (n) { return el('li', {text: n}); })));
    return [card('Stacks: flame graph of the sampled stacks', kids), card('Hot functions in this selection (15 by self time)', stTop(d, t))];
  }

  /* ---- the samples on the span timeline ---- */
  function stLaneOn() { return ST.lane && hasStacks(); }
  /* The page's marks per thread: {t: Float64Array, code: Int32Array}. */
  function stMarks() {
    var s = stData();
    if (ST.marksSrc === s) return ST.marks;
    ST.marksSrc = s; ST.marks = {};
    arr(s && s.marks).forEach(function (a) {
      var n = (a.length - 1) >> 1, m = {t: new Float64Array(n), code: new Int32Array(n)}, t = 0;
      for (var i = 0; i < n; i++) { t += a[1 + 2 * i]; m.t[i] = t; m.code[i] = a[2 + 2 * i]; }
      ST.marks[a[0]] = m;
    });
    return ST.marks;
  }
  /* Gives the timeline's lanes their sampled threads (l.st), adding a lane
   * for a thread that sampled but recorded no span. */
  function stLanes(list) {
    if (!stLaneOn()) return;
    var d = stDecoded(), by = {};
    list.forEach(function (l) { by[l.pid + '/' + l.tid] = l; });
    Object.keys(stMarks()).forEach(function (k) {
      var th = d.threads[+k], p = d.procs[th[0]], key = p[0] + '/' + th[1], l = by[key];
      if (!l) {
        l = by[key] = {rank: p[1], pid: p[0], tid: th[1], tracks: [],
          label: (p[1] >= 0 ? 'rank ' + p[1] + ' · ' : '') + p[2] + ' ' + p[0] + ' · thread ' + (th[2] || '') + ' ' + th[1]};
        list.push(l);
      }
      l.st = +k;
    });
  }
  function stLaneH(l) { return stLaneOn() && l.st !== undefined ? ST_STRIP + 2 : 0; }
  function stStripY(l) { return l.y + LANE_HEAD + l.tracks.length * ROW; }
  /* Calls fn(lane, marks, i) for each sample of a lane in [v0, v1] (and
   * the one whose interval reaches into it). */
  function stEachMark(lanes, v0, v1, fn) {
    var s = stData(), ms = stMarks(), back = (s.interval_ns || 0) * (s.mark_stride || 1);
    lanes.list.forEach(function (l) {
      var m = l.st === undefined ? null : ms[l.st];
      if (!m) return;
      var lo = 0, hi = m.t.length;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (m.t[mid] < v0 - back) lo = mid + 1; else hi = mid; }
      for (var i = lo; i < m.t.length && m.t[i] <= v1 + back; i++) fn(l, m, i);
    });
  }
  /* Draws each lane's samples in [v0, v1]: how many. Per pixel column the
   * strip is dark when a sample there was on a CPU, else pale when one was
   * waiting (a sample covers the time before it); runs of equal columns are
   * one rectangle, so a frame costs a pass over the samples in view and a
   * few fills, however dense they are. */
  function stDrawMarks(g, lanes, v0, v1, nsPx, X, W) {
    if (!stLaneOn()) return 0;
    var s = stData(), ms = stMarks(), iv = (s.interval_ns || 1e7) * (s.mark_stride || 1);
    var w = Math.max(1, iv / nsPx), n = 0, on = new Path2D(), off = new Path2D(), nc = Math.ceil(W) + 1;
    var cols = new Uint8Array(nc);
    g.fillStyle = '#f1f3f5';
    lanes.list.forEach(function (l) {
      var m = l.st === undefined ? null : ms[l.st];
      if (!m) return;
      var y = stStripY(l), t = m.t, code = m.code, len = t.length, i, k;
      g.fillRect(0, y, W, ST_STRIP);
      cols.fill(0);
      var lo = 0, hi = len;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (t[mid] < v0) lo = mid + 1; else hi = mid; }
      for (i = lo; i < len && t[i] - iv <= v1; i++) {
        var x1 = (t[i] - v0) / nsPx, v = (code[i] & 1) + 1;
        var c0 = Math.max(0, Math.floor(x1 - w)), c1 = Math.min(nc, Math.ceil(x1));
        for (k = c0; k < c1; k++) if (cols[k] < v) cols[k] = v;
        n++;
      }
      for (k = 0; k < nc;) {
        var st = cols[k], e = k + 1;
        while (e < nc && cols[e] === st) e++;
        if (st === 2) on.rect(k, y, e - k, ST_STRIP);
        else if (st === 1) off.rect(k, y + 2, e - k, ST_STRIP - 4);
        k = e;
      }
    });
    g.fillStyle = '#adb5bd'; g.fill(off);
    g.fillStyle = '#343a40'; g.fill(on);
    return n;
  }
  /* The sample at canvas point (x, y) within 3 pixels, or null. */
  function stHit(lanes, x, y, v0, nsPx) {
    if (!stLaneOn()) return null;
    var ms = stMarks(), hit = null, best = 4;
    lanes.list.forEach(function (l) {
      var m = l.st === undefined ? null : ms[l.st], sy = stStripY(l);
      if (!m || y < sy - 1 || y > sy + ST_STRIP + 1) return;
      for (var i = 0; i < m.t.length; i++) {
        var dx = Math.abs((m.t[i] - v0) / nsPx - x);
        if (dx < best) { best = dx; hit = {sample: {thread: l.st, t: m.t[i], code: m.code[i], lane: l}}; }
      }
    });
    return hit;
  }
  function stSampleInfo(box, x) {
    var d = stDecoded(), node = (x.code >> 1) - 1, path = stPath(d, node);
    var rows = [['sample', x.code & 1 ? 'on a CPU' : 'off a CPU (waiting)'], ['time', fmtNs(x.t)], ['where', x.lane.label]];
    if (!path.length) rows.push(['stack', '(no Python frame)']);
    path.slice().reverse().forEach(function (nd, k) {
      var f = d.nodes[nd].func;
      rows.push([k ? '' : 'stack', stFuncLabel(d, f) + ' (' + stWhere(d, f, d.nodes[nd].line) + ')']);
    });
    box.appendChild(el('table', {id: 'sample-detail'}, rows.map(function (r) { return el('tr', null, [el('td', {text: r[0]}), el('td', {class: 'name', text: r[1]})]); })));
  }
  function stLaneToggle() {
    if (!hasStacks()) return null;
    var b = el('input', {type: 'checkbox', id: 'st-lane', onchange: function () { ST.lane = b.checked; if (TL.sel && TL.sel.sample) TL.sel = null; tlRedraw(); }});
    b.checked = ST.lane;
    return el('label', {class: 'hint'}, [b, ' stack samples (a strip under each thread: dark on a CPU, pale waiting; click one for its stack)']);
  }
  /* For the browser tests. */
  window.mlprofStacks = {
    frames: function () {
      var d = ST.dec;
      return ST.flame ? ST.flame.drawn().map(function (f) {
        var n = f.node;
        return {name: n.name, where: stNodeWhere(d, n), depth: f.depth, total: n.value, self: n.self, x: f.x, w: f.w};
      }) : [];
    },
    marks: function () {
      var out = [];
      if (!stLaneOn() || !TL.canvas) return out;
      stEachMark(tlLanes(), TL.v0, TL.v1, function (l, m, i) {
        out.push({thread: l.st, pid: l.pid, tid: l.tid, t: m.t[i], cpu: !!(m.code[i] & 1), y: stStripY(l) + ST_STRIP / 2});
      });
      return out;
    }
  };

  /* ---- distributed -------------------------------------------------------
   * The ranks of a distributed job (D.report.distributed, docs/distributed.md):
   * per rank compute, communication and waiting per step, the straggler,
   * imbalance over the steps, the collectives and the rank x rank bytes. */
  function DI() { return R().distributed || null; }
  function hasDist() { return !!(DI() && arr(DI().ranks).length); }
  function distRankBars(d) {
    var parts = [['compute', PART_COLORS.forward], ['communication', PART_COLORS.communication], ['waiting', '#c8372d']];
    var rows = arr(d.ranks).map(function (x) {
      var n = Math.max(1, x.steps);
      return {x: x, v: [x.compute_ns / n, Math.max(0, x.exposed_comm_ns - x.wait_ns) / n, x.wait_ns / n]};
    });
    var vmax = 1;
    rows.forEach(function (r) { vmax = Math.max(vmax, r.v[0] + r.v[1] + r.v[2]); });
    var W = 900, rowH = 22, L = 120, H = rows.length * rowH + 8, straggler = d.straggler ? d.straggler.rank : null;
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', id: 'dist-bars'});
    rows.forEach(function (r, i) {
      var y = i * rowH + 4, x0 = L, bad = r.x.rank === straggler;
      g.appendChild(sv('text', {x: L - 6, y: y + 13, 'text-anchor': 'end', class: bad ? 'straggler' : null, text: 'rank ' + r.x.rank + (bad ? ' straggler' : '')}));
      r.v.forEach(function (v, j) {
        var w = v / vmax * (W - L - 110);
        if (w <= 0) return;
        g.appendChild(titled(sv('rect', {x: x0, y: y + 2, width: w, height: rowH - 7, fill: parts[j][1]}),
          'rank ' + r.x.rank + ': ' + parts[j][0] + ' ' + fmtNs(v) + ' per step'));
        x0 += w;
      });
      g.appendChild(sv('text', {x: x0 + 6, y: y + 13, text: fmtNs(r.v[0] + r.v[1] + r.v[2]) + ' per step'}));
    });
    var legend = el('div', {class: 'legend'}, parts.map(function (p) {
      return el('span', null, [el('i', {style: 'background:' + p[1] + ';height:10px'}), p[0] === 'communication' ? 'communication (not waiting)' : p[0]]);
    }));
    return el('div', null, [legend, g]);
  }
  /* Imbalance per step as bars coloured by the step's straggler. */
  function distStepChart(d) {
    var steps = arr(d.steps), W = 900, H = 200, L = 70, B = 24, T = 10;
    var vmax = 0.01, ranks = {};
    steps.forEach(function (s) { vmax = Math.max(vmax, s.imbalance || 0); ranks[s.straggler] = true; });
    vmax *= 1.05;
    var g = sv('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', id: 'dist-steps'});
    for (var k = 0; k <= 4; k++) {
      var y = T + (1 - k / 4) * (H - T - B);
      g.appendChild(sv('line', {x1: L, x2: W - 10, y1: y, y2: y, stroke: '#eef0f4'}));
      g.appendChild(sv('text', {x: L - 4, y: y + 4, 'text-anchor': 'end', text: num(100 * vmax * k / 4) + '%'}));
    }
    var bw = (W - L - 10) / Math.max(1, steps.length);
    steps.forEach(function (s, i) {
      var h = (s.imbalance || 0) / vmax * (H - T - B);
      g.appendChild(titled(sv('rect', {x: L + i * bw + 0.5, y: H - B - h, width: Math.max(0.5, bw - 1), height: h,
        fill: COLORS[s.straggler % COLORS.length]}),
        'step ' + s.step + ': imbalance ' + num(100 * s.imbalance) + '%, straggler rank ' + s.straggler +
        ' (' + fmtNs(s.delay_ns) + ' behind), mean compute ' + fmtNs(s.mean_compute_ns) + ', waiting ' + fmtNs(s.wait_ns)));
    });
    if (steps.length) {
      g.appendChild(sv('text', {x: L, y: H - 6, text: 'step ' + steps[0].step}));
      g.appendChild(sv('text', {x: W - 10, y: H - 6, 'text-anchor': 'end', text: 'step ' + steps[steps.length - 1].step}));
    }
    var legend = el('div', {class: 'legend'}, Object.keys(ranks).map(function (r) {
      return el('span', null, [el('i', {style: 'background:' + COLORS[r % COLORS.length] + ';height:10px'}), 'straggler rank ' + r]);
    }));
    return el('div', null, [legend, g]);
  }
  function distTable(id, heads, rows) {
    return el('table', {id: id}, [el('thead', null, el('tr', null, heads.map(function (h) { return el('th', {text: h}); }))),
      el('tbody', null, rows)]);
  }
  /* Bytes sent from each rank (rows) to each (columns), shaded by bytes. */
  function distMatrix(d) {
    var links = arr(d.links), ranks = arr(d.ranks).map(function (x) { return x.rank; }), cell = {}, bmax = 1;
    if (!links.length) return el('p', {class: 'muted', text: 'No point-to-point traffic recorded.'});
    links.forEach(function (l, i) { cell[l.src + '/' + l.dst] = {l: l, slow: i === d.slowest_link}; bmax = Math.max(bmax, l.bytes); });
    return distTable('dist-matrix', ['from \\ to'].concat(ranks.map(function (r) { return 'rank ' + r; })), ranks.map(function (src) {
      return el('tr', null, [el('td', {text: 'rank ' + src})].concat(ranks.map(function (dst) {
        var c = cell[src + '/' + dst];
        if (!c) return el('td', {class: 'muted', text: '–'});
        return el('td', {class: c.slow ? 'slow' : null, style: 'background:rgba(47,111,222,' + (0.08 + 0.5 * c.l.bytes / bmax).toFixed(2) + ')',
          title: c.l.count + ' messages, ' + fmtBytes(c.l.bytes) + ' in ' + fmtNs(c.l.time_ns) + ', ' + fmtBytes(c.l.bandwidth_bytes_per_s) + '/s' + (c.slow ? ' (slowest link)' : ''),
          text: fmtBytes(c.l.bytes)});
      })));
    }));
  }
  function viewDistributed() {
    var d = DI(), st = d.straggler, rk = arr(d.ranks);
    var out = [card('Distributed', [figures([['ranks', String(rk.length)], ['steps matched', String(arr(d.steps).length)],
      ['load balance', num(100 * d.load_balance) + '%'], ['communication efficiency', num(100 * d.comm_efficiency) + '%'],
      ['parallel efficiency', num(100 * d.parallel_efficiency) + '%'],
      ['straggler', st ? 'rank ' + st.rank + ', ' + fmtNs(st.delay_ns) + ' behind a step' : 'none'],
      ['collectives matched', String(d.matched_collectives)]]),
      st && arr(st.zones).length ? el('p', null, ['Where the straggler spends more, per step: '].concat(arr(st.zones).map(function (z) {
        return el('span', {class: 'chip', text: z.zone + ' +' + fmtNs(z.extra_per_step_ns)});
      }))) : null,
      el('p', {class: 'hint', text: 'Times per rank over the steps matched across ranks. Communication is the time in blocking communication; waiting is the part spent for the last participant of a collective to arrive. Ranks are aligned on rank 0\'s clock.'})])];
    out.push(card('Per rank: compute, communication and waiting per step', distRankBars(d)));
    out.push(card('Ranks', distTable('dist-ranks', ['rank', 'host', 'clock', 'offset', 'uncertainty', 'steps', 'compute', 'exposed comm', 'waiting', 'overlap', 'straggler steps'], rk.map(function (x) {
      return el('tr', {class: st && x.rank === st.rank ? 'straggler' : null}, [el('td', {text: x.rank}), el('td', {class: 'l', text: x.host || '–'}),
        el('td', {text: x.clock}), el('td', {text: fmtNs(x.offset_ns)}), el('td', {text: x.uncertainty_ns === null ? '–' : '±' + fmtNs(x.uncertainty_ns)}),
        el('td', {text: x.steps}), el('td', {text: fmtNs(x.compute_ns)}), el('td', {text: fmtNs(x.exposed_comm_ns)}), el('td', {text: fmtNs(x.wait_ns)}),
        el('td', {text: num(100 * x.overlap_share) + '%'}), el('td', {text: x.straggler_steps})]);
    }))));
    if (arr(d.steps).length) out.push(card('Imbalance per step ((max − mean) / mean of the ranks\' compute), coloured by the step\'s straggler', distStepChart(d)));
    out.push(card('Collectives', arr(d.collectives).length ? distTable('dist-colls', ['collective', 'size', 'ranks', 'count', 'bytes', 'time', 'waiting', 'transfer', 'algbw', 'busbw'],
      arr(d.collectives).map(function (c) {
        return el('tr', null, [el('td', {class: 'name', text: c.op}), el('td', {text: fmtBytes(c.size_bytes)}), el('td', {text: c.ranks}), el('td', {text: c.count}),
          el('td', {text: fmtBytes(c.bytes)}), el('td', {text: fmtNs(c.time_ns)}), el('td', {text: fmtNs(c.wait_ns)}), el('td', {text: fmtNs(c.transfer_ns)}),
          el('td', {text: fmtBytes(c.algbw_bytes_per_s) + '/s'}), el('td', {text: fmtBytes(c.busbw_bytes_per_s) + '/s'})]);
      })) : el('p', {class: 'muted', text: 'No collectives matched across ranks.'})));
    out.push(card('Point-to-point bytes, rank × rank (sender\'s records)', distMatrix(d)));
    return out;
  }

  var VIEWS = {overview: viewOverview, zones: viewZones, timeline: viewTimeline, memory: viewMemory,
    gpu: viewGpu, findings: viewFindings, processes: viewProcesses, spans: viewSpans};

  function render() {
    var main = document.getElementById('main');
    var scroll = window.scrollY;
    while (main.firstChild) main.removeChild(main.firstChild);
    var parts;
    try {
      parts = VIEWS[state.tab]();
    } catch (e) {
      parts = [card('Error', el('p', {class: 'bad', text: 'cannot draw this view: ' + e.message}))];
      if (window.console) console.warn(e);
    }
    addKids(main, parts.filter(Boolean));
    Array.prototype.forEach.call(document.querySelectorAll('nav button'), function (b) {
      b.className = b.getAttribute('data-tab') === state.tab ? 'on' : '';
    });
    window.scrollTo(0, scroll);
    var r = R(), sub = document.getElementById('sub');
    sub.textContent = (r.generator || 'mlprof') + ' · ' + fmtNs(r.wall_ns) + ' · ' + r.spans + ' spans · ' + arr(r.processes).length + ' processes';
  }

  function init() {
    tip = el('div', {class: 'tip'});
    document.body.appendChild(tip);
    document.getElementById('title').textContent = D.title || 'mlprof report';
    var nav = document.getElementById('nav');
    /* The Compare view exists only when the page holds several runs. */
    if (hasCompare()) { TABS.push(['compare', 'Compare']); VIEWS.compare = viewCompare; }
    if (hasLayers()) { TABS.splice(2, 0, ['layers', 'Layers']); VIEWS.layers = viewLayers; }
    if (hasDist()) { TABS.push(['distributed', 'Distributed']); VIEWS.distributed = viewDistributed; }
    /* Stacks: when the run sampled stacks (live: they may come later). */
    if (hasStacks() || D.live) {
      var zi = TABS.map(function (t) { return t[0]; }).indexOf('zones');
      TABS.splice(zi + 1, 0, ['stacks', 'Stacks']); VIEWS.stacks = viewStacks;
    }
    /* A diff page opens on its Diff view. */
    if (D.diff) { TABS.unshift(['diff', 'Diff']); VIEWS.diff = viewDiff; state.tab = 'diff'; }
    TABS.forEach(function (t) {
      nav.appendChild(el('button', {'data-tab': t[0], id: 'tab-' + t[0], text: t[1], onclick: function () {
        state.tab = t[0]; if (location.hash !== '#' + t[0]) history.replaceState(null, '', '#' + t[0]); render();
      }}));
    });
    var h = location.hash.slice(1);
    if (VIEWS[h]) state.tab = h;
    render();
    if (D.live && D.data_url) poll();
  }

  /* Live: fetch the data again every second and redraw the current view. */
  function poll() {
    var status = document.getElementById('live');
    var busy = false;
    setInterval(function () {
      if (busy) return;
      busy = true;
      fetch(D.data_url, {cache: 'no-store'}).then(function (resp) {
        if (!resp.ok) throw new Error('HTTP ' + resp.status);
        return resp.json();
      }).then(function (d) {
        d.live = true;
        d.data_url = D.data_url;
        var changed = JSON.stringify(d.report) !== JSON.stringify(D.report) || JSON.stringify(d.series) !== JSON.stringify(D.series);
        D = d;
        status.textContent = 'live · updated ' + new Date().toLocaleTimeString();
        if (changed && !document.querySelector('.chart rect[display=""]')) render();
      }).catch(function (e) {
        status.textContent = 'live · ' + e.message;
      }).then(function () { busy = false; });
    }, 1000);
  }

  init();
})();
