// The page of `gatetrace view`: asks the server's /api/* for data (typed parameters only) and
// draws it with Plotly (served from the installed plotly package). What each view shows is
// kept in `window.gatetrace` (the browser tests read the page's data from there).
"use strict";

const state = { overview: null, heatmap: null, unit: null, select: null, match: null, parts: null, ranked: null, labelled: null, compare: null };
window.gatetrace = state;
const $ = (id) => document.getElementById(id);

async function api(path, params) {
  // a series: every answer from the recording of the value chosen
  const query = new URLSearchParams(state.at === undefined ? params : { ...params, at: state.at }).toString();
  const response = await fetch(`/api/${path}?${query}`);
  const body = await response.json();
  if (!response.ok) {
    showError(body.error || `${response.status}`);
    throw new Error(body.error);
  }
  $("error").hidden = true;
  return body;
}

function showError(message) {
  // the banner stays at the top of the window (CSS: fixed), wherever the user is on the page
  $("error").textContent = message;
  $("error").hidden = false;
}

// A number JSON has no word for (an infinite or NaN value: recordings may hold them) comes as
// text, "inf", "-inf" or "nan"; null is nothing there. Tables show the text, plots leave the
// point out (and say where, `notDrawn`).
const finite = (v) => (typeof v === "number" ? v : null);
const plotted = (values) => values.map(finite);
function notDrawn(name, steps, values) {
  const odd = steps.map((s, k) => [s, values[k]]).filter(([, v]) => typeof v === "string");
  if (!odd.length) return "";
  const shown = odd.slice(0, 3).map(([s, v]) => `${v} at step ${s}`).join(", ");
  return ` (${name} ${shown}${odd.length > 3 ? ` and ${odd.length - 3} more` : ""}: not drawn)`;
}

// numbers as a reader takes them in: 4 decimals, bytes in KB/MB/GB
const fixed4 = (v) => (v === null || v === undefined ? "" : typeof v === "string" ? v : Number(v).toFixed(4));
// 3 significant digits, trailing zeros dropped, and Plotly's minus sign (U+2212): the notation
// of its (d3's) ".3~g", which the comparison's axes are given (SIG3), so that a table and the
// axis beside it write 3.6e−8 alike
const SIG3 = ".3~g";
function sig3(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  let s = Number(v).toPrecision(3);
  if (s.includes(".")) s = s.replace(/0+(?=e|$)/, "").replace(/\.(?=e|$)/, "");
  return s.replace(/-/g, "\u2212");
}
function size(bytes) {
  const units = ["bytes", "KB", "MB", "GB", "TB"];
  let k = 0, v = bytes;
  while (v >= 1000 && k < units.length - 1) { v /= 1000; k += 1; }
  return k ? `${v.toFixed(1)} ${units[k]}` : `${v} bytes`;
}

function options(select, values, chosen) {
  select.innerHTML = "";
  for (const v of values) {
    const o = document.createElement("option");
    o.value = o.textContent = v;
    if (v === chosen) o.selected = true;
    select.appendChild(o);
  }
}

function row(table, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  table.querySelector("tbody").appendChild(tr);
  return tr;
}

function openLink(example, start) {
  const a = document.createElement("a");
  a.className = "open";
  a.textContent = "open";
  a.onclick = () => { $("example").value = example; showHeatmap().then(() => { if (start !== undefined) $("start").value = start; }); };
  return a;
}

const cellInfo = (name) => state.overview.cells.find((c) => c.name === name);

// -- overview ---------------------------------------------------------------------------------
async function loadOverview() {
  const o = await api("overview", {});
  state.overview = o;
  $("source").textContent = `${o.path}: ${o.summary.source ? o.summary.source.path : ""}` +
    (o.held ? ` (${o.held})` : "") + (o.rounding ? ` (${o.rounding})` : "");
  const summary = $("summary");
  summary.innerHTML = "";
  for (const [k, v] of Object.entries(o.summary)) {
    if (typeof v !== "object") {
      const tr = summary.insertRow();
      tr.insertCell().textContent = k === "bytes" ? "on disk" : k;
      tr.insertCell().textContent = k === "bytes" ? size(v) : v;
    }
  }
  // a summary holds no rows: what it counts are the values it summarised
  const counted = (k) => (o.summary.kind === "summary" && k !== "weights" ? `${k.replace(/s$/, "")} values summarised` : `${k} rows`);
  if (o.summary.rows) for (const [k, v] of Object.entries(o.summary.rows)) { const tr = summary.insertRow(); tr.insertCell().textContent = counted(k); tr.insertCell().textContent = v.toLocaleString("en"); }
  const body = $("cells").querySelector("tbody");
  body.innerHTML = "";
  for (const c of o.cells) {
    const tr = row($("cells"), [c.name, c.kind, c.units, c.steps, c.gates.join(" "), c.states.join(" "), c.values_from.label]);
    tr.lastChild.title = c.values_from.words;
  }
  const names = o.cells.map((c) => c.name);
  options($("overview-cell"), names, names[0]);
  options($("cell"), names, names[0]);
  $("overview-python").textContent = o.python;
  const columns = ["activation", "preactivation", ...(o.parts ? ["input", "recurrent", "bias", "peephole", "recurrent_bias"] : [])];
  options($("column"), columns, "activation");
  drawOverview(names[0]);
  fillLabels();
  if (o.series) drawAcross(o.series);
}

// a series: pick the value of its key shown, and each gate's saturation along the series
function drawAcross(s) {
  $("series").hidden = false;
  $("series-key").textContent = s.key;
  options($("at"), s.values.map(String), String(s.at));
  $("series-python").textContent = s.python;
  const cell = $("overview-cell").value;
  const traces = [];
  for (const [gate, g] of Object.entries(s.gates[cell] || {})) {
    traces.push({ x: g.at, y: g.right, mode: "lines+markers", name: `${gate} right` });
    traces.push({ x: g.at, y: g.left, mode: "lines+markers", name: `${gate} left`, line: { dash: "dot" } });
  }
  Plotly.newPlot($("across"), traces,
    { title: { text: `${cell}: saturation along the series (mean over units)` }, margin: { t: 30, l: 40, r: 10, b: 35 },
      xaxis: { title: { text: s.key } }, yaxis: { range: [0, 1] } }, { displayModeBar: false });
}

function drawOverview(name) {
  const c = cellInfo(name);
  $("saturation-note").textContent = "Each point a unit: the share of its activations near each end of its gate's " +
    "nonlinearity (left-saturated, x; right-saturated, y), over every recorded position: below 0.1 and above 0.9 " +
    "for sigmoid, below -0.9 and above 0.9 for tanh; a gate whose nonlinearity has no range (relu) does not saturate.";
  for (const id of ["saturation", "bands"]) $(id).innerHTML = "";
  for (const g of c.gate_stats) {
    const sat = document.createElement("div");
    $("saturation").appendChild(sat);
    const title = `${g.gate} (${g.nonlinearity}): saturation`;
    if (g.below === null) {  // nothing to count: draw the frame with its reason
      Plotly.newPlot(sat, [], { title: { text: title }, margin: { t: 30, l: 48, r: 10, b: 40 },
        xaxis: { visible: false }, yaxis: { visible: false },
        annotations: [{ text: `${g.nonlinearity} has no range:<br>it does not saturate`, showarrow: false, x: 0.5, y: 0.5, xref: "paper", yref: "paper" }] },
        { displayModeBar: false });
    } else {
      // half-transparent markers, axes far enough past 0 and 1 that a marker there is whole;
      // units that share a point are said: in its tooltip, and (the largest groups) beside it
      const shared = sharedPoints(g);
      Plotly.newPlot(sat, [{ x: g.left, y: g.right, text: g.units.map((u, k) => shared.at[k]), mode: "markers", type: "scatter",
        marker: { size: 7, opacity: 0.55 },
        hovertemplate: `%{text}<br>below ${g.below}: %{x:.3f}<br>above ${g.above}: %{y:.3f}<extra></extra>` }],
        { title: { text: title }, margin: { t: 30, l: 48, r: 10, b: 40 }, annotations: shared.notes,
          xaxis: { title: { text: `share below ${g.below}` }, range: [-0.1, 1.1], zeroline: false },
          yaxis: { title: { text: `share above ${g.above}` }, range: [-0.1, 1.1], zeroline: false } }, { displayModeBar: false });
    }
    const band = document.createElement("div");
    $("bands").appendChild(band);
    Plotly.newPlot(band, [
      { x: g.steps, y: plotted(g.high), mode: "lines", line: { width: 0 }, showlegend: false, hoverinfo: "skip" },
      // from the statistics the files carry: each percentile within a histogram bin of the exact one
      { x: g.steps, y: plotted(g.low), mode: "lines", line: { width: 0 }, fill: "tonexty",
        name: g.within > 0 ? `10th-90th percentile (within ${g.within.toPrecision(2)})` : "10th-90th percentile" },
      { x: g.steps, y: plotted(g.mean), mode: "lines", name: "mean" + notDrawn("mean", g.steps, g.mean) }],
      { title: { text: `${g.gate}: per step${g.read_in_full ? " (read in full: no statistics in its files)" : ""}` }, margin: { t: 30, l: 48, r: 10, b: 78 }, showlegend: true,
        legend: { orientation: "h", y: -0.62, font: { size: 10 } },
        xaxis: { title: { text: "step" } }, yaxis: { title: { text: "activation" } } },
      { displayModeBar: false });
  }
}

// The units of a saturation plot that share a point: each point's tooltip names them all
// (`at`), and the three largest groups get a note beside their point (`notes`).
function sharedPoints(g) {
  const groups = new Map();
  g.units.forEach((u, k) => {
    const key = `${g.left[k]},${g.right[k]}`;
    if (!groups.has(key)) groups.set(key, { x: g.left[k], y: g.right[k], units: [] });
    groups.get(key).units.push(u);
  });
  const at = g.units.map((u, k) => {
    const units = groups.get(`${g.left[k]},${g.right[k]}`).units;
    return units.length > 1 ? `units ${units.join(", ")} (${units.length}, at one point)` : `unit ${u}`;
  });
  const notes = [...groups.values()].filter((p) => p.units.length > 1)
    .sort((p, q) => q.units.length - p.units.length).slice(0, 3)
    .map((p) => ({ x: p.x, y: p.y, text: `${p.units.length} units overlap at (${p.x}, ${p.y})`, showarrow: true,
      arrowhead: 0, ax: p.x < 0.5 ? 40 : -40, ay: p.y < 0.5 ? -40 : 40, xanchor: p.x < 0.5 ? "left" : "right",
      font: { size: 11 }, bgcolor: "rgba(255,255,255,0.85)" }));
  return { at, notes };
}

// -- one sequence -------------------------------------------------------------------------------
function fillLabels() {
  const c = cellInfo($("cell").value);
  const labels = $("kind").value === "gate" ? c.gates : c.states;
  options($("label"), labels, labels.includes("f") ? "f" : labels[0]);
  $("label-caption").textContent = $("kind").value;
  $("column").disabled = $("kind").value !== "gate";
}

function params() {
  return { cell: $("cell").value, kind: $("kind").value, label: $("label").value, column: $("column").value, example: $("example").value };
}

async function showHeatmap() {
  let h;
  try {
    h = await api("heatmap", params());
  } catch (err) {
    // no stale sequence left under the error: the plot and its data go
    Plotly.purge($("heatmap"));
    state.heatmap = null;
    throw err;
  }
  state.heatmap = h;
  const ticks = h.tokens ? h.steps.map((s, k) => `${s} ${h.tokens[k]}`) : h.steps.map(String);
  const text = h.values.map((r, s) => r.map((v, u) => `example ${h.example}<br>step ${h.steps[s]}${h.tokens ? " (" + h.tokens[s] + ")" : ""}<br>unit ${u}<br>${h.kind === "gate" ? h.column : "value"} ${v}`));
  // one colour scale per gate and column, the same for every sequence (LSTMVis', TensorBoard's way):
  // a diverging map for signed values, centred on 0
  const what = h.kind === "gate" ? h.column : h.label;
  const traces = [{ z: h.values.map(plotted), x: h.units, y: ticks, type: "heatmap", text, hoverinfo: "text",
    colorscale: h.scale.signed ? "RdBu" : "Viridis", reversescale: h.scale.signed, zmin: h.scale.lo, zmax: h.scale.hi,
    colorbar: { title: { text: what, side: "right" } } }];
  const layout = { title: { text: `${h.cell} ${h.label}${h.kind === "gate" ? " " + h.column : ""}, example ${h.example}` }, dragmode: "select",
    xaxis: { title: { text: "unit" }, dtick: 1 }, yaxis: { title: { text: "step" }, autorange: "reversed", type: "category" }, margin: { t: 40 } };
  if (h.label_track) {
    // the label of each step, a track beside the units (as LSTMVis' annotation tracks)
    // its own fixed range: each label value one colour, whatever the sequence
    const [lo, hi] = h.label_range;
    // its key below the values' colour bar: the label's lowest and highest value, each its colour
    traces[0].colorbar = { ...traces[0].colorbar, len: 0.55, y: 1, yanchor: "top" };
    traces.push({ z: h.label_track.map((v) => [v]), x: ["label"], y: ticks, type: "heatmap", xaxis: "x2",
      colorscale: [[0, "#1b9e77"], [1, "#d95f02"]], zmin: lo, zmax: hi === lo ? lo + 1 : hi,
      showscale: true, colorbar: { title: { text: "label", side: "right" }, len: 0.35, y: 0, yanchor: "bottom",
        thickness: 14, tickvals: [lo, hi], ticktext: [String(lo), String(hi)] },
      hovertemplate: "step %{y}<br>label %{z}<extra></extra>" });
    layout.xaxis.domain = [0, 0.86];
    layout.xaxis2 = { domain: [0.88, 0.93] };
  }
  await Plotly.newPlot($("heatmap"), traces, layout);
  $("heatmap-python").textContent = h.python;
  $("heatmap").on("plotly_click", (e) => clicked(e.points[0]));
  $("heatmap").on("plotly_selected", (e) => brushed(e));
}

function stepOf(point) {
  return state.heatmap.steps[point.pointIndex ? point.pointIndex[0] : state.heatmap.steps.length - 1];
}

async function clicked(point) {
  if (point.curveNumber !== 0) return;  // the label track
  const h = state.heatmap;
  const step = stepOf(point), unit = point.x;
  if (h.kind === "gate") {
    await showUnit(unit);
    if (state.overview.parts) await showParts(step);
  }
}

function brushed(event) {
  if (!event || !event.range) return;
  const [a, b] = event.range.y;
  const steps = state.heatmap.steps;
  const lo = Math.max(0, Math.ceil(Math.min(a, b))), hi = Math.min(steps.length - 1, Math.floor(Math.max(a, b)));
  $("start").value = steps[lo];
  $("stop").value = steps[hi] + 1;
}

async function showUnit(unit) {
  const p = params();
  const u = await api("unit", { cell: p.cell, gate: p.label, unit, example: p.example, column: p.column });
  state.unit = u;
  $("unit-title").textContent = `${u.cell} ${u.gate} unit ${u.unit}`;
  $("unit-hint").hidden = true;
  $("course").hidden = false;
  $("top").hidden = false;
  await Plotly.newPlot($("course"), [{ x: u.steps, y: plotted(u.values), mode: "lines+markers", name: `example ${u.example}` }],
    { title: { text: `unit ${u.unit} along example ${u.example}${notDrawn(u.column, u.steps, u.values)}` }, xaxis: { title: { text: "step" } }, yaxis: { title: { text: u.column } }, margin: { t: 40 } });
  const table = $("top");
  table.querySelector("tbody").innerHTML = "";
  u.top.example.forEach((e, k) => row(table, [k + 1, e, u.top.step[k], fixed4(u.top.value[k]), openLink(e)]));
  $("unit-python").textContent = u.python;
}

async function showParts(step) {
  const p = params();
  const r = await api("parts", { cell: p.cell, gate: p.label, example: p.example, step });
  state.parts = r;
  $("parts-title").textContent = `${r.cell} ${r.gate}, example ${r.example}, step ${r.step}`;
  $("parts-note").textContent = "input + recurrent + bias (+ recurrent_bias) = preactivation; a peephole is beside it, not in it.";
  const names = ["input", "recurrent", "bias", "recurrent_bias", "peephole"].filter((k) => r[k].some((v) => v !== null));
  const traces = names.map((k) => ({ x: r.units, y: plotted(r[k]), type: "bar", name: k }));
  traces.push({ x: r.units, y: plotted(r.preactivation), mode: "markers", name: "preactivation", marker: { color: "black" } });
  $("parts").hidden = false;
  await Plotly.newPlot($("parts"), traces, { barmode: "relative", xaxis: { title: { text: "unit" }, dtick: 1 },
    yaxis: { title: { text: "preactivation and its parts" } }, margin: { t: 20 } });
  $("parts-python").textContent = r.python;
}

// -- units for a label -------------------------------------------------------------------------
// The units are scored in the background from the view's start: until they all are, the server
// says how far it is, and the page asks again every half second.
let ranking = 0;  // the last ranking asked for: an older one (another value of a series) stops
const pause = (ms) => new Promise((done) => setTimeout(done, ms));

async function loadRanked() {
  const mine = ++ranking;
  state.ranked = null;
  $("units-panel").hidden = false;
  $("ranked").querySelector("tbody").innerHTML = "";
  let r = await api("ranked", {});
  while (!r.done) {
    if (mine !== ranking) return;
    const p = r.progress;
    $("units-source").textContent = r.labels;
    $("units-note").textContent = `Scoring every unit against the labels: ${p.scored.toLocaleString("en")} of ` +
      `${p.units === null ? "(counting)" : p.units.toLocaleString("en")} units scored (${p.seconds} s so far); ` +
      "the ranking follows when every unit is scored.";
    await pause(500);
    r = await api("ranked", {});
  }
  if (mine !== ranking) return;
  state.ranked = r;
  $("units-source").textContent = r.labels;
  const metric = r.metric === "auc" ? "AUC, as max(AUC, 1 - AUC)" : "|Pearson r|";
  $("units-note").textContent = `${r.scored} units scored by ${metric}${r.per_sequence ? " at each sequence's last step" : ""}; ` +
    `with the labels shuffled, the best unit scored ${fixed4(r.chance_best)}. An activation stands for its preactivation ` +
    `where they score the same; ties come in order of separation. Click a row: that unit along the sequence shown, beside its label.`;
  const table = $("ranked");
  table.querySelector("tbody").innerHTML = "";
  r.rows.forEach((x, k) => {
    const tr = row(table, [k + 1, x.cell, x.table, x.name, x.column, x.unit, fixed4(x.score), x.direction, fixed4(x.chance),
      fixed4(x.separation), x.n]);
    tr.onclick = () => showLabelled(x);
  });
  $("units-python").textContent = r.python;
}

async function showLabelled(x) {
  const c = await api("labelled", { cell: x.cell, table: x.table, name: x.name, column: x.column, unit: x.unit, example: $("example").value });
  state.labelled = c;
  const [lo, hi] = state.ranked.label_range, pad = 0.1 * (hi - lo || 1);
  // binary labels: their two values as the axis' only ticks
  const two = state.ranked.metric === "auc" ? { tickvals: [lo, hi], ticktext: [String(lo), String(hi)] } : {};
  await Plotly.newPlot($("labelled"), [
    { x: c.steps, y: c.values, mode: "lines+markers", name: `unit ${c.unit}` },
    { x: c.steps, y: c.label, mode: "lines", name: "label", yaxis: "y2", line: { shape: "hv", dash: "dot" } }],
    { title: { text: `${c.cell} ${c.name}${c.table === "gates" ? " " + c.column : ""} unit ${c.unit}, example ${c.example}` },
      xaxis: { title: { text: "step" }, zeroline: false }, yaxis: { title: { text: c.table === "gates" ? c.column : "value" }, zeroline: false },
      yaxis2: { title: { text: "label" }, overlaying: "y", side: "right", range: [lo - pad, hi + pad], zeroline: false,
        showgrid: false, ...two }, margin: { t: 40 } });
  $("units-python").textContent = c.python;
}

// -- select and match ---------------------------------------------------------------------------
async function doSelect() {
  const p = params();
  const s = await api("select", { ...p, start: $("start").value, stop: $("stop").value, threshold: $("threshold").value, outside: $("outside").checked ? 1 : 0 });
  state.select = s;
  $("selected-units").textContent = s.units.length ? s.units.join(", ") : "(none)";
  $("match").disabled = !s.units.length;
  $("select-python").textContent = s.python;
}

// A match scans the sequences in example order for under a second at a time: the page goes on
// from where each answer stopped until it has MATCHES more, or every sequence is scanned; "more"
// goes on for the next MATCHES.
const MATCHES = 20;
let matching = 0;  // the last match begun: an older one stops

async function doMatch() {
  const s = state.select;
  const ask = { cell: s.cell, kind: s.kind, label: s.label, column: s.column, units: s.units.join(","), threshold: s.threshold,
    length: s.stop - s.start };
  state.match = null;
  $("matches").querySelector("tbody").innerHTML = "";
  await matchOn({ ask, length: ask.length, matches: [], count: 0, scanned: 0, sequences: null, next: 0, python: "" });
}

async function matchOn(m) {
  const mine = ++matching;
  state.match = null;
  $("match-more").hidden = true;
  const wanted = m.matches.length + MATCHES;
  while (m.next !== null && m.matches.length < wanted) {
    const r = await api("match", { ...m.ask, k: wanted - m.matches.length, from: m.next });
    if (mine !== matching) return;
    m = { ...m, matches: m.matches.concat(r.matches), scanned: m.scanned + r.scanned, sequences: r.sequences, next: r.next, python: r.python };
    m.count = m.matches.length;
    for (const x of r.matches) row($("matches"), [x.example, `${x.start}-${x.stop - 1}`, x.length, openLink(x.example, x.start)]);
    const where = m.next === null ? `all ${m.sequences.toLocaleString("en")} sequences` :
      `the first ${m.scanned.toLocaleString("en")} of ${m.sequences.toLocaleString("en")} sequences (examples before ${m.next})`;
    $("match-count").textContent = `${m.count} example(s) with the units on together for ${m.length} step(s) or more, ` +
      `in example order, in ${where}${m.next === null ? "" : m.matches.length < wanted ? "; scanning on..." : ""}`;
    $("select-python").textContent = m.python;
  }
  state.match = m;
  $("match-more").hidden = m.next === null;
}

// -- against another recording (gatetrace view RUN --compare OTHER) ---------------------------
async function loadCompare() {
  const c = await api("compare", {});
  state.compare = c;
  $("compare-panel").hidden = false;
  $("compare-source").textContent = c.b;
  const f = c.first_beyond;
  $("compare-note").textContent = `${c.column}, B - A; inputs: ${c.inputs}; beyond: a difference above ${c.tolerance}. ` +
    (f ? `First beyond: gate ${f.gate} of ${f.cell}, at step ${f.step}.` : `No gate differs by more than ${c.tolerance} at any step.`) +
    // gates one recording holds and the other does not (recorded with --gates)
    c.not_compared.map((n) => ` Not compared: gate ${n.gate} of ${n.cell} (${n.only_in ? `recorded in ${n.only_in} only` : "recorded in neither"}).`).join("");
  // where each side's values came from, per cell; what a 0 proves where both are replays of equal weights
  const origins = $("compare-origins");
  origins.innerHTML = "";
  for (const o of c.origins) {
    for (const [side, cell, from] of [["A", o.cell, o.a], ["B", o.cell_b, o.b]]) {
      const li = document.createElement("li");
      li.textContent = `${side}, cell ${cell}: ${from.from}: ${from.words}`;
      origins.appendChild(li);
    }
  }
  $("compare-notes").innerHTML = "";
  for (const note of c.notes) {
    const li = document.createElement("li");
    li.textContent = note;
    $("compare-notes").appendChild(li);
  }
  $("compare-notes").hidden = !c.notes.length;
  for (const id of ["compare-gates", "compare-units", "compare-examples", "compare-outputs"]) $(id).querySelector("tbody").innerHTML = "";
  for (const o of c.outputs) {
    row($("compare-outputs"), [o.output, o.values, sig3(o.max_abs), sig3(o.mean_abs), sig3(o.rmse), o.beyond,
      o.first_step_beyond === null ? "none" : o.first_step_beyond, o.nan_a_only, o.nan_b_only]);
  }
  $("compare-outputs").hidden = !c.outputs.length;
  for (const g of c.gates) {
    row($("compare-gates"), [g.cell, g.gate, g.from_a, g.from_b, sig3(g.max_abs), sig3(g.mean_abs), sig3(g.rmse), sig3(g.units_beyond),
      g.first_step_beyond === null ? "none" : g.first_step_beyond, g.saturated_a_only, g.saturated_b_only, g.nan_a_only, g.nan_b_only]);
  }
  for (const u of c.units) row($("compare-units"), [u.cell, u.gate, u.unit, sig3(u.max_abs), sig3(u.mean_abs)]);
  for (const e of c.examples) row($("compare-examples"), [e.cell, e.gate, e.example, sig3(e.max_abs), sig3(e.mean_abs), openLink(e.example)]);
  $("compare-python").textContent = c.python;
  // the panel's own cell: those compared
  const cells = Object.keys(c.steps);
  options($("compare-cell"), cells, cells[0]);
  drawCompare(cells[0]);
}

function drawCompare(cell) {
  const traces = Object.entries(state.compare.steps[cell] || {}).map(([gate, g]) => (
    { x: g.step, y: plotted(g.mean_abs), mode: "lines+markers", name: gate + notDrawn("mean", g.step, g.mean_abs) }));
  Plotly.newPlot($("compare-steps"), traces,
    { title: { text: `${cell}: mean |B - A| along the steps` }, margin: { t: 30, l: 60, r: 10, b: 40 },
      xaxis: { title: { text: "step" } },
      yaxis: { title: { text: "mean |B - A|" }, rangemode: "tozero", tickformat: SIG3, hoverformat: SIG3, exponentformat: "e" } },
    { displayModeBar: false });
}

window.addEventListener("DOMContentLoaded", async () => {
  $("overview-cell").onchange = () => {
    drawOverview($("overview-cell").value);
    if (state.overview.series) drawAcross(state.overview.series);
  };
  $("compare-cell").onchange = () => drawCompare($("compare-cell").value);
  $("at").onchange = async () => {
    state.at = Number($("at").value);
    await loadOverview();
    if (state.overview.summary.kind !== "summary") await showHeatmap();
    if (state.overview.unit_labels && state.overview.summary.kind !== "summary") await loadRanked();
  };
  $("cell").onchange = fillLabels;
  $("kind").onchange = fillLabels;
  $("show").onclick = showHeatmap;
  $("select").onclick = doSelect;
  $("match").onclick = doMatch;
  $("match-more").onclick = () => matchOn(state.match);
  try {
    await loadOverview();
    // what drives a gate needs the preactivations' parts (recorded with --values ...,contributions)
    $("parts-panel").hidden = !state.overview.parts;
    if (state.overview.summary.kind === "summary") {
      // statistics only: the panels that show one sequence need every value
      for (const id of ["sequence", "unit-panel", "select-panel"]) $(id).hidden = true;
      $("summary-note").hidden = false;
    } else {
      await showHeatmap();
      // the ranking may still be scored: the other panels do not wait for it
      const ranked = state.overview.unit_labels ? loadRanked() : null;
      if (state.overview.compare) await loadCompare();
      await ranked;
    }
    document.body.dataset.ready = "1";
  } catch (err) {
    document.body.dataset.ready = "error";
  }
});
