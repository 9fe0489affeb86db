// The web calculator's drawing: analyze's JSON report as an inline SVG of stacked per-stage bars
// against the GPU's capacity, and explain's JSON items as a table. Plain functions of the JSON
// documents (schemas moemem.report/1 and moemem.explain/1); no state, no network.
"use strict";

const GIB = 2 ** 30;

// The categories of a stage's bytes, bottom to top, as `analyze --format json` names them; their
// sum is the stage's total (allocated + fragmentation + runtime; docs/formulas.md).
const CATEGORIES = [
  ["weights", "#4e79a7"], ["gradients", "#f28e2b"], ["optimizer", "#e15759"], ["activations", "#76b7b2"],
  ["buffers", "#59a14f"], ["fragmentation", "#edc948"], ["runtime", "#b07aa1"],
];

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function gib(bytes) { return (bytes / GIB).toFixed(2); }

// The segments of one stage's bar: each category, and "other" for any part of the total the
// categories leave out (none today; drawn so the bar's height is always the total).
function segments(stage) {
  const b = stage.bytes;
  const out = CATEGORIES.map(([name, color]) => ({ name, color, bytes: b[name] || 0 }));
  const rest = b.total - out.reduce((s, x) => s + x.bytes, 0);
  if (rest > 0) out.push({ name: "other", color: "#999", bytes: rest });
  return out;
}

function niceStep(max) {
  const raw = max / 6;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
}

// The stacked bars: one per pipeline stage, the capacity (solid) and the usable memory after the
// accuracy margin (dashed) as horizontal lines; the peak stage's label in bold.
function chartSvg(report) {
  const stages = report.stages;
  const gpu = report.gpu || null;
  const W = 920, H = 340, L = 56, R = 150, T = 14, B = 36;
  const pw = W - L - R, ph = H - T - B;
  const top = Math.max(...stages.map((s) => s.bytes.total), gpu ? gpu.capacity_bytes : 0) * 1.06 / GIB;
  const step = niceStep(top);
  const y = (g) => T + ph - (g / top) * ph;
  const slot = pw / stages.length, bw = Math.max(2, slot * 0.72);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" id="stage-chart" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-size="11">`];
  for (let g = 0; g <= top; g += step) {
    parts.push(`<line x1="${L}" x2="${L + pw}" y1="${y(g)}" y2="${y(g)}" stroke="#eee"/>`,
      `<text x="${L - 4}" y="${y(g) + 4}" text-anchor="end">${g}</text>`);
  }
  parts.push(`<text x="12" y="${T + ph / 2}" transform="rotate(-90 12 ${T + ph / 2})" text-anchor="middle">GiB per GPU</text>`);
  stages.forEach((s, i) => {
    const x = L + i * slot + (slot - bw) / 2;
    let acc = 0;
    parts.push(`<g class="stage" data-stage="${s.stage}" data-total="${s.bytes.total}">`);
    for (const seg of segments(s)) {
      if (seg.bytes <= 0) continue;
      const g0 = acc / GIB, g1 = (acc + seg.bytes) / GIB;
      acc += seg.bytes;
      parts.push(`<rect x="${x}" y="${y(g1)}" width="${bw}" height="${y(g0) - y(g1)}" fill="${seg.color}">` +
        `<title>stage ${s.stage}: ${seg.name} ${gib(seg.bytes)} GiB</title></rect>`);
    }
    const peak = report.peak && report.peak.stage === s.stage;
    parts.push(`<title>stage ${s.stage}: ${gib(s.bytes.total)} GiB</title></g>`,
      `<text x="${x + bw / 2}" y="${T + ph + 14}" text-anchor="middle"${peak ? ' font-weight="bold"' : ""}>${s.stage}</text>`);
  });
  parts.push(`<text x="${L + pw / 2}" y="${H - 4}" text-anchor="middle">pipeline stage</text>`);
  if (gpu) {
    parts.push(`<line id="capacity-line" x1="${L}" x2="${L + pw}" y1="${y(gpu.capacity_bytes / GIB)}" y2="${y(gpu.capacity_bytes / GIB)}" stroke="#c00" stroke-width="1.5"/>`,
      `<text x="${L + pw + 4}" y="${y(gpu.capacity_bytes / GIB) + 4}" fill="#c00">${escapeHtml(gpu.name)} ${gib(gpu.capacity_bytes)}</text>`);
    if (gpu.usable_bytes && gpu.usable_bytes < gpu.capacity_bytes) {
      parts.push(`<line x1="${L}" x2="${L + pw}" y1="${y(gpu.usable_bytes / GIB)}" y2="${y(gpu.usable_bytes / GIB)}" stroke="#c00" stroke-dasharray="4 3"/>`,
        `<text x="${L + pw + 4}" y="${y(gpu.usable_bytes / GIB) + 4}" fill="#c00">with margin ${gib(gpu.usable_bytes)}</text>`);
    }
  }
  parts.push("</svg>");
  return parts.join("");
}

function legendHtml() {
  return '<div class="legend">' + CATEGORIES.map(([n, c]) => `<span><i style="background:${c}"></i>${n}</span>`).join("") + "</div>";
}

function renderChart(report, el) {
  el.innerHTML = chartSvg(report) + legendHtml();
}

// explain's items: a total per category, then every item (module, tensor, bytes, how computed).
function renderExplain(doc, el) {
  const byCat = new Map();
  for (const it of doc.items) byCat.set(it.category, (byCat.get(it.category) || 0) + it.bytes);
  const rows = [`<table id="explain-categories"><tr><th>category</th><th>GiB</th></tr>`];
  for (const [cat, bytes] of byCat) rows.push(`<tr><td>${escapeHtml(cat)}</td><td class="num">${gib(bytes)}</td></tr>`);
  rows.push(`<tr><th>total</th><th class="num">${gib(doc.total_bytes)}</th></tr></table><br>`,
    `<table id="explain-items"><tr><th>category</th><th>module</th><th>item</th><th>bytes</th><th>GiB</th><th>how</th></tr>`);
  for (const it of doc.items) {
    rows.push(`<tr><td>${escapeHtml(it.category)}</td><td>${escapeHtml(it.module || "")}</td><td>${escapeHtml(it.item)}</td>` +
      `<td class="num">${it.bytes.toLocaleString("en-US")}</td><td class="num">${gib(it.bytes)}</td><td>${escapeHtml(it.detail || "")}</td></tr>`);
  }
  rows.push("</table>");
  el.innerHTML = rows.join("");
}
