// The web calculator's logic: the form's state <-> the URL's hash <-> the command line, run by
// moemem compiled to WebAssembly (src/web_entry.cpp's moemem_run: the CLI's own parser and JSON
// writer, in-process), then drawn by chart.js. Every change recomputes at once.
"use strict";

// The README's reference command (its first `moemem analyze`): what the page shows with no hash.
const REFERENCE = {
  model: "deepseek-v3", tp: "2", pp: "16", dp: "32", ep: "8", sp: "1", "distributed-optimizer": "1",
  "global-batch": "1024", recompute: "selective", "recompute-modules": "mla_up_proj,layernorm", gpu: "h800-80g",
};
// The form's fields that are analyze's flags, in the command line's order; checkboxes are bare
// flags. "model" is left out when a config.json is given; "extra" is split into more flags.
const FLAGS = ["model", "profile", "tp", "pp", "vpp", "dp", "cp", "ep", "etp", "sp", "schedule", "micro-batch",
  "seq-len", "global-batch", "recompute", "recompute-modules", "zero", "distributed-optimizer", "gpu"];
const STATE_KEYS = [...FLAGS, "extra", "stage", "config", "config-name"];

let moemem = null;          // the instantiated module
let configName = "config.json";

// One command line through the module: {code, stdout, stderr, error}.
function runMoemem(args, modelJson) {
  const request = JSON.stringify({ args, model_json: modelJson || null, model_name: configName });
  const size = moemem.lengthBytesUTF8(request) + 1;
  const ptr = moemem._malloc(size);
  try {
    moemem.stringToUTF8(request, ptr, size);
    return JSON.parse(moemem.UTF8ToString(moemem._moemem_run(ptr)));
  } finally {
    moemem._free(ptr);
  }
}

// Splits "other flags" as a shell would for plain words and '...' or "..." quoting.
function splitWords(text) {
  const words = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(text)) !== null) words.push(m[1] ?? m[2] ?? m[3]);
  return words;
}

function form() { return document.getElementById("form"); }

function readForm() {
  const state = {};
  for (const key of STATE_KEYS) {
    const el = form().elements[key];
    if (!el) continue;
    const value = el.type === "checkbox" ? (el.checked ? "1" : "") : el.value.trim();
    if (value !== "") state[key] = value;
  }
  if (state.config) {
    state["config-name"] = configName;
    try {
      state.config = JSON.stringify(JSON.parse(state.config));  // shorter links; moemem reads either
    } catch (e) {
      // not JSON: passed as it is, for moemem to name the error
    }
  }
  return state;
}

function writeForm(state) {
  for (const key of STATE_KEYS) {
    const el = form().elements[key];
    if (!el) continue;
    if (el.type === "checkbox") el.checked = state[key] === "1";
    else el.value = state[key] ?? (el.tagName === "SELECT" && key === "model" ? REFERENCE.model : "");
  }
  configName = state["config-name"] || "config.json";
}

// The state as the hash's query string, and back: a link holds the whole configuration.
function stateToHash(state) { return "#" + new URLSearchParams(state).toString(); }
function stateFromUrl() {
  const text = location.hash.length > 1 ? location.hash.slice(1) : location.search.slice(1);
  if (!text) return { ...REFERENCE };
  return Object.fromEntries(new URLSearchParams(text));
}

// analyze's arguments for a state (the page adds --format json, and explain's --stage).
function analyzeArgs(state) {
  const args = [];
  for (const flag of FLAGS) {
    if (!(flag in state) || (flag === "model" && state.config)) continue;
    if (flag === "sp" || flag === "distributed-optimizer") args.push("--" + flag);
    else args.push("--" + flag, state[flag]);
  }
  return args.concat(splitWords(state.extra || ""));
}

function shellQuote(word) { return /^[\w@%+=:,./-]+$/.test(word) ? word : "'" + word.replace(/'/g, "'\\''") + "'"; }

function show(id, html) { document.getElementById(id).innerHTML = html; }
function setStatus(text, state) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.dataset.state = state;
}

function summaryHtml(report) {
  const peak = report.stages.find((s) => s.stage === report.peak.stage);
  let html = `<b>${escapeHtml(report.model.name)}</b>, ${report.model.total_params.toLocaleString("en-US")} parameters, ` +
    `profile ${escapeHtml(report.profile)}, world size ${report.parallel.world_size}. ` +
    `Peak: stage <b id="peak-stage">${report.peak.stage}</b>, <b>${gib(report.peak.total_bytes)} GiB</b> ` +
    `(<span id="peak-bytes">${report.peak.total_bytes.toLocaleString("en-US")}</span> bytes)`;
  if (report.gpu) {
    html += report.gpu.all_fit ? ` <span class="ok">fits ${escapeHtml(report.gpu.name)}</span>`
      : ` <span class="bad">does not fit ${escapeHtml(report.gpu.name)}</span>`;
  }
  if (report.uncertainty && report.uncertainty.records) {
    const u = report.uncertainty;
    html += `<br>On ${u.records} published ${escapeHtml(report.profile)} runs the measurement was ` +
      `${u.low_pct.toFixed(1)}% .. +${u.high_pct.toFixed(1)}% of the prediction (moemem validate).`;
  }
  if (peak) html += `<br>Peak stage: weights ${gib(peak.bytes.weights)}, gradients ${gib(peak.bytes.gradients)}, ` +
    `optimizer ${gib(peak.bytes.optimizer)}, activations ${gib(peak.bytes.activations)} GiB.`;
  return html;
}

function clearResults() {
  for (const id of ["summary", "chart", "explain", "explain-title", "assumptions"]) show(id, "");
}

// Recomputes the report and the explain table for the form's state, and writes the state to the URL.
function update() {
  const state = readForm();
  history.replaceState(null, "", stateToHash(state));
  const args = analyzeArgs(state);
  const config = state.config || null;
  const command = "moemem analyze " + args.map(shellQuote).join(" ") + (config ? "  # --model: the config.json given" : "");
  show("command", escapeHtml(command));
  const result = runMoemem(["analyze", ...args, "--format", "json"], config);
  show("notes", escapeHtml(result.stderr || ""));
  window.moememResult = { args, analyze: null, explain: null, error: null };
  if (result.code !== 0) {
    clearResults();
    show("error", escapeHtml(result.stderr || `moemem exited with ${result.code}`));
    window.moememResult.error = result.error || { message: result.stderr };
    setStatus("error", "error");
    return;
  }
  show("error", "");
  const report = JSON.parse(result.stdout);
  window.moememResult.analyze = report;
  show("summary", summaryHtml(report));
  renderChart(report, document.getElementById("chart"));
  show("assumptions", report.assumptions.map((a) => `<li>${escapeHtml(a)}</li>`).join(""));
  const stage = state.stage ?? String(report.peak.stage);
  const explained = runMoemem(["explain", "--stage", stage, ...args, "--format", "json"], config);
  if (explained.code === 0) {
    const doc = JSON.parse(explained.stdout);
    window.moememResult.explain = doc;
    show("explain-title", `Stage ${doc.stage}, item by item (moemem explain --stage ${doc.stage})`);
    renderExplain(doc, document.getElementById("explain"));
  } else {
    show("explain-title", "explain");
    show("explain", `<div id="error">${escapeHtml(explained.stderr)}</div>`);
  }
  setStatus(`computed in your browser (moemem ${moemem.version || ""})`, "done");
}

let pending = 0;
function scheduleUpdate() {
  clearTimeout(pending);
  pending = setTimeout(update, 120);
}

function fillPresets() {
  const result = runMoemem(["models", "--format", "json"]);
  const select = document.getElementById("model");
  const names = result.code === 0 ? JSON.parse(result.stdout).models.map((m) => m.preset) : [REFERENCE.model];
  select.innerHTML = names.map((n) => `<option>${escapeHtml(n)}</option>`).join("");
}

function wire() {
  form().addEventListener("input", scheduleUpdate);
  form().addEventListener("change", scheduleUpdate);
  document.getElementById("upload").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    configName = file.name;
    form().elements.config.value = await file.text();
    e.target.value = "";
    update();
  });
  document.getElementById("reset").addEventListener("click", () => { writeForm(REFERENCE); update(); });
  document.getElementById("copy").addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(location.href));
  window.addEventListener("hashchange", () => { writeForm(stateFromUrl()); update(); });
}

createMoemem().then((module) => {
  moemem = module;
  const version = runMoemem(["--version"]);
  moemem.version = version.code === 0 ? version.stdout.trim().replace(/^moemem /, "") : "";
  fillPresets();
  writeForm(stateFromUrl());
  wire();
  update();
}).catch((e) => setStatus("could not load moemem.wasm: " + e, "error"));
