/* The trace explorer's page: one script, no library, nothing loaded from outside.
 *
 * Views (hash routes, so links, the back button and file:// all work):
 *   #/stages                      the run and its stages with gate reports
 *   #/trajectories?FILTERS        the filtered, sorted, paged list (filters as in tasks/explorer/queries.py)
 *   #/t/ID                        one trajectory turn by turn
 *   #/compare?task_id=T&left=&right=   two trajectories of one task side by side (base vs trained)
 *   #/tools?stage=S               per-tool numbers (invented tool names as one "unknown tool" row below) and error
 *                                 signatures; every number links to its trajectories
 *   #/curves                      reward / Pass@1 per step, one card per stage (inline SVG), eval summaries, tables
 *   #/runs?with=B                 this run (A) vs another run beside it (B), as `recipe compare A B`: stages, gate
 *                                 criteria, metrics, the stages' tables, both runs' curves per stage (served only)
 *
 * Data comes from the JSON API (recipe view RUN) or, in a static export (recipe view RUN --static OUT), from
 * window.EXPLORER_STATIC plus one data/t/ID.js script per trajectory; `api` hides which. Every value reaches the page
 * as a text node (never innerHTML), so trace text cannot inject markup.
 */
"use strict";

const FILTERS = ["stage", "source", "policy", "task", "domain", "tier", "stop_reason", "error_class", "tool", "call",
  "call_error", "reward_min", "reward_max", "weight_version"];
const SORTS = { id: "id", reward: "reward", length: "n_tokens", turns: "n_turns", tool_calls: "n_tool_calls" };
const PREVIEW_CHARS = 600;
const STATIC = window.EXPLORER_STATIC || null;

// --- DOM helpers ----------------------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return append(node, children);
}

function fmt(value) {
  if (value === null || value === undefined || value === "") return "–";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return String(value);
    return Math.abs(value) >= 1000 ? value.toFixed(0) : String(Number(value.toPrecision(3)));
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

const pct = (value) => (value === null || value === undefined ? "–" : `${(100 * value).toFixed(1)} %`);

function expandable(text, limit = PREVIEW_CHARS, cls = "mono") {
  text = text === null || text === undefined ? "" : String(text);
  const box = h("div", { class: cls });
  if (text.length <= limit) return append(box, [text]);
  const shown = document.createTextNode(text.slice(0, limit) + "…");
  let open = false;
  const toggle = h("button", { class: "more", type: "button" }, `show all (${text.length} chars)`);
  toggle.addEventListener("click", () => {
    open = !open;
    shown.textContent = open ? text : text.slice(0, limit) + "…";
    toggle.textContent = open ? "show less" : `show all (${text.length} chars)`;
  });
  return append(box, [shown, " ", toggle]);
}

function table(header, rows, options = {}) {
  const numeric = new Set(options.numeric || []);
  return h("table", { class: options.class },
    h("thead", {}, h("tr", {}, header.map((name, i) => h("th", { class: numeric.has(i) ? "num" : null }, name)))),
    h("tbody", {}, rows.map((row) => {
      const cells = row.cells || row;
      const tr = h("tr", { class: row.onclick ? "clickable" : null, "data-id": row.id },
        cells.map((cell, i) => h("td", { class: numeric.has(i) ? "num" : null }, cell)));
      if (row.onclick) tr.addEventListener("click", row.onclick);
      return tr;
    })));
}

const badge = (text, cls) => h("span", { class: `badge ${cls || text}` }, text);
const verdict = (passed) => badge(passed ? "pass" : "FAIL", passed ? "pass" : "fail");
const chip = (label, value) => h("span", { class: "chip" }, `${label} `, h("b", {}, fmt(value)));

function link(text, hash) {
  return h("a", { href: hash, onclick: (event) => event.stopPropagation() }, text);
}

function route(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") query.set(key, value);
  }
  const text = query.toString();
  return `#/${path}${text ? "?" + text : ""}`;
}

// --- data: the JSON API or the static export ------------------------------------------------------------------------

async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
  return body;
}

const httpApi = {
  run: () => getJSON("api/run"),
  trajectories: (params) => getJSON("api/trajectories?" + new URLSearchParams(params)),
  trajectory: (id) => getJSON(`api/trajectories/${encodeURIComponent(id)}`),
  compare: (taskId) => getJSON("api/compare?" + new URLSearchParams({ task_id: taskId })),
  tools: (stage) => getJSON("api/tools?" + new URLSearchParams({ stage: stage || "" })),
  curves: () => getJSON("api/curves"),
  runs: () => getJSON("api/runs"),
  compareRuns: (other) => getJSON("api/compare-runs?" + new URLSearchParams({ with: other })),
};

function staticApi(data) {
  const loaded = new Map();
  const waiting = new Map();
  window.explorerDetail = (id, view) => {
    loaded.set(id, view);
    const resolve = waiting.get(id);
    if (resolve) resolve(view);
    waiting.delete(id);
  };
  const callMatches = (f) => ([tool, ok, empty, timedOut, errorClass]) =>
    (!f.tool || tool === f.tool)
    && (f.call !== "failed" || !ok)
    && (f.call !== "empty" || (ok && empty))
    && (f.call !== "timeout" || timedOut)
    && (!f.call_error || (!ok && errorClass === f.call_error));
  // The same rules as queries.TrajectoryFilter.where (SQL: a NULL compared to a value matches nothing).
  function matches(row, f) {
    for (const column of ["stage", "source", "policy", "domain", "tier", "stop_reason", "error_class"]) {
      if (f[column] && row[column] !== f[column]) return false;
    }
    if (f.task && !(row.task_id || "").includes(f.task)) return false;
    if (f.reward_min !== "" && f.reward_min !== undefined && !(row.reward !== null && row.reward >= Number(f.reward_min))) return false;
    if (f.reward_max !== "" && f.reward_max !== undefined && !(row.reward !== null && row.reward <= Number(f.reward_max))) return false;
    if (f.weight_version !== "" && f.weight_version !== undefined) {
      const v = Number(f.weight_version);
      if (!(row.weight_version_min !== null && row.weight_version_min <= v && row.weight_version_max >= v)) return false;
    }
    if (f.tool || f.call_error || (f.call && f.call !== "any")) return row.calls.some(callMatches(f));
    return true;
  }
  return {
    run: async () => data.overview,
    trajectories: async (params) => {
      const column = SORTS[params.sort || "id"] || "id";
      const sign = params.order === "desc" ? -1 : 1;
      const rows = data.rows.filter((row) => matches(row, params)).sort((a, b) => {
        const x = a[column], y = b[column];
        if (x !== y) {
          if (x === null) return 1;
          if (y === null) return -1;
          return x < y ? -sign : sign;
        }
        return sign * (a.id - b.id);
      });
      const offset = Number(params.offset || 0), limit = Number(params.limit || 50);
      return { total: rows.length, offset, limit, rows: rows.slice(offset, offset + limit) };
    },
    trajectory: (id) => new Promise((resolve, reject) => {
      id = Number(id);
      if (loaded.has(id)) return resolve(loaded.get(id));
      waiting.set(id, resolve);
      const script = h("script", { src: `data/t/${id}.js` });
      script.addEventListener("error", () => reject(new Error(`trajectory ${id} is not in this static export`)));
      document.head.appendChild(script);
    }),
    compare: async (taskId) => ({ task_id: taskId, rows: data.rows.filter((row) => row.task_id === taskId) }),
    tools: async (stage) => data.tools[stage || ""] || { stage, tools: [], signatures: [] },
    curves: async () => data.curves,
    runs: async () => { throw new Error("a static export holds one run: compare runs in `recipe view RUN` or with `recipe compare A B`"); },
    compareRuns: async () => { throw new Error("a static export holds one run"); },
  };
}

const api = STATIC ? staticApi(STATIC) : httpApi;

// --- the shell ------------------------------------------------------------------------------------------------------

const state = { overview: null, renderId: 0 };
const main = () => document.getElementById("main");

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  return { parts: (path || "stages").split("/"), params: Object.fromEntries(new URLSearchParams(query || "")) };
}

function showError(error) {
  main().replaceChildren(h("div", { class: "error-box" }, String(error.message || error)));
}

async function render() {
  const renderId = ++state.renderId;
  const { parts, params } = parseHash();
  const view = parts[0];
  for (const a of document.querySelectorAll("nav a")) {
    const target = a.dataset.view;
    a.classList.toggle("active", target === view || (target === "trajectories" && (view === "t" || view === "compare")));
  }
  const views = { stages: stagesView, trajectories: listView, t: trajectoryView, compare: compareView, tools: toolsView, curves: curvesView, runs: runsView };
  const build = views[view] || stagesView;
  try {
    const content = await build(params, parts);
    if (renderId !== state.renderId) return; // a newer navigation won
    main().replaceChildren(content);
    document.body.dataset.view = view;
  } catch (error) {
    if (renderId === state.renderId) showError(error);
  }
}

async function start() {
  try {
    state.overview = await api.run();
  } catch (error) {
    showError(error);
    return;
  }
  const run = state.overview.run;
  const code = run.code && run.code.commit ? run.code.commit.slice(0, 10) + (run.code.dirty ? "+dirty" : "") : "unknown";
  document.getElementById("run-title").textContent =
    `run ${run.run_id} · profile ${run.profile} · code ${code}${STATIC ? " · static export" : ""}`;
  document.title = `${run.run_id} · trace explorer`;
  if (STATIC) document.querySelector('nav a[data-view="runs"]').remove(); // one run in the folder: nothing to compare
  window.addEventListener("hashchange", render);
  await render();
}

// --- stages ---------------------------------------------------------------------------------------------------------

function gateTable(criteria) {
  return table(["criterion", "measured", "needs", "verdict", "detail"],
    criteria.map((c) => [c.name, fmt(c.measured), `${c.op} ${fmt(c.threshold)}`, verdict(c.passed), c.detail || ""]),
    { numeric: [1], class: "gate" });
}

function findingsList(findings, stage) {
  const tools = new Set(state.overview.facets.tool.map((t) => t.value));
  return h("ul", { class: "findings" }, findings.map((f) =>
    h("li", {}, h("b", {}, f.subject), `: ${f.problem} → ${f.advice}`, " ",
      tools.has(f.subject) ? link("its trajectories", route("trajectories", { stage, tool: f.subject })) : null)));
}

async function stagesView() {
  const o = state.overview;
  const run = o.run;
  const counts = o.counts || {};
  const head = h("div", { class: "card" },
    h("h2", {}, `Run ${run.run_id}`),
    h("div", { class: "chips" },
      chip("profile", run.profile), chip("created", run.created_at), chip("config", run.config_hash),
      chip("code", run.code && run.code.commit ? run.code.commit.slice(0, 10) + (run.code.dirty ? "+dirty" : "") : null),
      chip("host", run.host), chip("trajectories", counts.trajectories), chip("tool calls", counts.tool_calls),
      chip("train steps", counts.train_steps), chip("eval trials", counts.evals)),
    run.history.length ? h("p", { class: "muted" }, run.history.map((c) => `config changed ${c.at}: ${c.reason}`).join("; ")) : null,
    Object.keys(o.trackers || {}).length ? h("p", { class: "trackers" }, "Trackers: ",
      ...Object.entries(o.trackers).map(([name, where]) => /^https?:/.test(where)
        ? h("span", {}, h("a", { href: where, target: "_blank", rel: "noopener" }, name), " ")
        : h("span", { title: where }, `${name}: ${where} `))) : null,
    o.decoded ? null : h("p", { class: "note" }, "No tokenizer found for this run: trajectories show token ids (pass --tokenizer)."));
  if (!o.stages.length) return h("div", {}, head, h("p", { class: "muted" }, "No stage has written a manifest yet."));
  const cards = o.stages.map((s) => h("div", { class: "card stage", "data-stage": s.stage },
    h("div", { class: "card-head" },
      h("h3", {}, s.folder), badge(s.status),
      h("span", { class: "muted" }, `attempt ${s.attempt} · ${fmt(s.duration_s)} s · started ${fmt(s.started_at)}`),
      s.trajectories ? link(`${countOf(s.trajectories, s.trajectories_of)} trajectories`, route("trajectories", { stage: s.stage })) : null,
      s.stage === "derisk" ? link("tool report", route("tools", { stage: s.stage })) : null),
    s.error ? h("div", { class: "error-box" }, s.error) : null,
    s.criteria.length ? gateTable(s.criteria) : h("p", { class: "muted" }, "no gate report"),
    s.findings.length ? h("div", {}, h("h3", {}, "Findings"), findingsList(s.findings, s.stage)) : null,
    Object.keys(s.metrics).length ? h("details", {}, h("summary", {}, `metrics (${Object.keys(s.metrics).length})`),
      table(["metric", "value"], Object.entries(s.metrics).map(([k, v]) => [k, fmt(v)]), { class: "kv" })) : null,
    Object.keys(s.tables).length ? h("p", {}, link("tables in Curves & tables", "#/curves")) : null));
  return h("div", {}, head, cards);
}

// --- trajectory list ------------------------------------------------------------------------------------------------

// A static export counts what its folder holds; `of` is the run's count when the folder holds fewer.
const countOf = (n, of) => (of === undefined || of === n ? fmt(n) : `${fmt(n)} of ${fmt(of)}`);

function facetSelect(name, label, values, current) {
  const select = h("select", { name }, h("option", { value: "" }, "any"),
    values.map((v) => h("option", { value: v.value, selected: v.value === current }, `${v.value} (${countOf(v.n, v.of)})`)));
  if (current && !values.some((v) => v.value === current)) select.appendChild(h("option", { value: current, selected: true }, current));
  return h("label", {}, label, select);
}

function filterBar(params) {
  const facets = state.overview.facets;
  const input = (name, label, type, extra) =>
    h("label", {}, label, h("input", { name, type, value: params[name] || "", ...extra }));
  const choice = (name, label, options, current) => h("label", {}, label,
    h("select", { name }, options.map(([value, text]) => h("option", { value, selected: value === (current || options[0][0]) }, text))));
  const form = h("form", { class: "filters card", id: "filters" },
    facetSelect("stage", "stage", facets.stage, params.stage),
    facetSelect("source", "source", facets.source, params.source),
    facetSelect("policy", "policy", facets.policy, params.policy),
    input("task", "task contains", "text", { placeholder: "task id", size: 14 }),
    facetSelect("domain", "domain", facets.domain, params.domain),
    facetSelect("tier", "tier", facets.tier, params.tier),
    facetSelect("tool", "tool", facets.tool, params.tool),
    choice("call", "its calls", [["any", "any"], ["failed", "failed"], ["empty", "empty on success"], ["timeout", "timed out"]], params.call),
    facetSelect("call_error", "call error", facets.call_error, params.call_error),
    facetSelect("error_class", "error class", facets.error_class, params.error_class),
    facetSelect("stop_reason", "stop reason", facets.stop_reason, params.stop_reason),
    input("reward_min", "reward ≥", "number", { step: "any" }),
    input("reward_max", "reward ≤", "number", { step: "any" }),
    input("weight_version", "weights version", "number", { step: 1, placeholder: `${fmt(facets.weight_version.low)}–${fmt(facets.weight_version.high)}` }),
    choice("sort", "sort by", [["id", "id"], ["reward", "reward"], ["length", "length (tokens)"], ["turns", "turns"], ["tool_calls", "tool calls"]], params.sort),
    choice("order", "order", [["asc", "ascending"], ["desc", "descending"]], params.order),
    choice("limit", "per page", [["50", "50"], ["25", "25"], ["100", "100"], ["200", "200"]], params.limit),
    h("button", { type: "button", onclick: () => { location.hash = route("trajectories", {}); } }, "clear"));
  const apply = () => {
    const values = {};
    for (const element of form.elements) if (element.name && element.value !== "") values[element.name] = element.value;
    if (values.call === "any") delete values.call;
    location.hash = route("trajectories", values);
  };
  form.addEventListener("change", apply);
  form.addEventListener("submit", (event) => { event.preventDefault(); apply(); });
  return form;
}

function trajectoryRows(rows) {
  return rows.map((r) => ({
    id: r.id,
    onclick: () => { location.hash = `#/t/${r.id}`; },
    cells: [link(String(r.id), `#/t/${r.id}`), r.stage, r.source, r.policy, r.task_id, r.domain || "–", r.tier || "–",
      fmt(r.reward), r.passed ? badge("pass", "pass") : badge("fail", "fail"), r.stop_reason, r.error_class || "–",
      `${fmt(r.n_generated)} / ${fmt(r.n_tokens)}`, fmt(r.n_turns), fmt(r.n_tool_calls),
      r.weight_version_min === r.weight_version_max ? fmt(r.weight_version_min) : `${r.weight_version_min}–${r.weight_version_max}`,
      fmt(r.step)],
  }));
}

const LIST_HEADER = ["id", "stage", "source", "policy", "task", "domain", "tier", "reward", "passed", "stop", "error",
  "generated / tokens", "turns", "calls", "weights", "step"];

async function listView(params) {
  const query = {};
  for (const name of [...FILTERS, "sort", "order", "limit", "offset"]) if (params[name]) query[name] = params[name];
  const page = await api.trajectories(query);
  const limit = Number(params.limit || page.limit || 50);
  const offset = Number(params.offset || 0);
  const go = (to) => { location.hash = route("trajectories", { ...params, offset: to || null }); };
  const last = Math.min(offset + page.rows.length, page.total);
  const pager = () => h("div", { class: "pager" },
    h("button", { type: "button", class: "prev", disabled: offset <= 0, onclick: () => go(Math.max(0, offset - limit)) }, "‹ previous"),
    h("span", { class: "list-count" }, page.total ? `${offset + 1}–${last} of ${page.total} trajectories` : "no trajectory matches"),
    h("button", { type: "button", class: "next", disabled: offset + limit >= page.total, onclick: () => go(offset + limit) }, "next ›"));
  const staticNote = STATIC && STATIC.rows.length < STATIC.total
    ? h("p", { class: "note" }, `This static export holds ${STATIC.rows.length} of the run's ${STATIC.total} trajectories: a sample of every stage and source, base and trained of a task kept together; the filters count what it holds ("N of M": M in the run). Serve the run (recipe view RUN) to read them all.`)
    : null;
  return h("div", {}, h("h2", {}, "Trajectories"), staticNote, filterBar(params), pager(),
    table(LIST_HEADER, trajectoryRows(page.rows), { numeric: [0, 7, 11, 12, 13], class: "list" }), page.rows.length > 20 ? pager() : null);
}

// --- one trajectory -------------------------------------------------------------------------------------------------

function maskBar(t) {
  const total = t.n_tokens || 1;
  const bar = svg("svg", { class: "maskbar", viewBox: `0 0 ${total} 1`, preserveAspectRatio: "none", role: "img" },
    svg("title", {}, "loss mask: green = generated by the model (trained on), grey = prompt and observations"));
  for (const [start, end, value] of t.mask_runs) {
    if (value) bar.appendChild(svg("rect", { x: start, y: 0, width: end - start, height: 1, fill: "#2f9e55" }));
  }
  return bar;
}

function pieceBlock(piece) {
  const label = piece.generated
    ? `generated · tokens ${piece.start}–${piece.end} (loss mask 1)${piece.mean_logprob !== undefined ? ` · mean logprob ${fmt(piece.mean_logprob)}` : ""}`
    : `observation · tokens ${piece.start}–${piece.end} (loss mask 0)`;
  const text = piece.truncated ? `${piece.text}\n[… ${piece.truncated} more characters not sent]` : piece.text;
  return h("div", {}, h("div", { class: "piece-label" }, label, piece.nudge !== undefined ? [" ", badge(`context nudge: ~${piece.nudge} % left`, "nudge")] : null),
    expandable(text, piece.generated ? 2000 : PREVIEW_CHARS, `piece ${piece.generated ? "gen" : "obs"}`));
}

function callsTable(calls) {
  return table(["tool", "arguments", "result", "error class", "error", "empty", "latency"],
    calls.map((c) => [h("b", {}, c.tool), expandable(JSON.stringify(c.args, null, 1), 160),
      c.ok ? badge("ok", "ok") : badge(c.timed_out ? "timed out" : "failed", "failed"), c.error_class || "–",
      c.error ? expandable(c.error, 160) : "–", c.returned_empty ? badge("empty", "warn") : "no", `${fmt(c.latency_s)} s`]),
    { class: "calls", numeric: [6] });
}

function turnBlock(turn) {
  return h("div", { class: "turn", "data-turn": turn.turn },
    h("div", { class: "turn-head" }, h("b", {}, `Turn ${turn.turn}`),
      h("span", { class: "muted" }, `finish ${fmt(turn.finish_reason)} · weights v${fmt(turn.weight_version)} · ${turn.n_generated} generated tokens · mean logprob ${fmt(turn.mean_logprob)}`),
      turn.calls.length ? h("span", { class: "muted" }, `· ${turn.calls.length} tool call${turn.calls.length > 1 ? "s" : ""}`) : null,
      turn.nudge !== null ? badge(`context nudge fired (~${turn.nudge} % left)`, "nudge") : null),
    turn.pieces.map(pieceBlock),
    turn.calls.length ? h("div", {}, h("div", { class: "piece-label" }, "tool calls of this turn (their results are in the observation above)"), callsTable(turn.calls)) : null);
}

function gradeTable(t) {
  if (!t.criteria.length) return h("p", { class: "muted" }, "no per-criterion grade recorded");
  return table(["criterion", "verdict", "detail"], t.criteria.map((c) => [c.kind, verdict(c.passed), c.detail || ""]), { class: "grades" });
}

function summaryChips(t) {
  return h("div", { class: "chips" }, chip("reward", t.reward), chip("passed", t.passed), chip("stop", t.stop_reason),
    chip("error class", t.error_class), chip("generated / tokens", `${t.n_generated} / ${t.n_tokens}`), chip("prompt", t.prompt_len),
    chip("turns", t.n_turns), chip("tool calls", t.n_tool_calls),
    chip("weights", t.weight_version_min === t.weight_version_max ? t.weight_version_min : `${t.weight_version_min}–${t.weight_version_max}`),
    chip("llm s", t.llm_s), chip("env s", t.env_s), chip("harness", t.harness), chip("group", t.group_id), chip("sample", t.sample_index));
}

function trajectoryBody(t) {
  const tito = t.masked_outside_spans === null ? null
    : `loss mask vs turn spans: ${t.masked_outside_spans} masked tokens outside, ${t.unmasked_in_spans} unmasked inside`;
  return h("div", { class: "trajectory", "data-id": t.id },
    summaryChips(t),
    t.error ? h("div", { class: "error-box" }, expandable(t.error, 300)) : null,
    h("h3", {}, "Grade"), gradeTable(t),
    h("p", {}, h("span", { class: "muted" }, "final answer: "), h("span", { class: "mono" }, fmt(t.final_answer))),
    h("h3", {}, "Tokens"),
    h("div", { class: "legend" }, h("span", {}, h("span", { class: "swatch gen" }), "generated (loss mask 1)"),
      h("span", {}, h("span", { class: "swatch obs" }), "prompt / observation (mask 0)"), tito ? h("span", {}, tito) : null,
      t.decoded ? null : h("span", {}, "token ids (no tokenizer)")),
    maskBar(t),
    h("details", {}, h("summary", {}, `prompt (${t.prompt.reduce((n, p) => n + p.end - p.start, 0)} tokens)`), t.prompt.map(pieceBlock)),
    t.turns.map(turnBlock),
    t.unplaced_calls.length ? h("div", {}, h("h3", {}, "Tool calls outside the recorded turns"), callsTable(t.unplaced_calls)) : null);
}

async function trajectoryView(params, parts) {
  const t = await api.trajectory(parts[1]);
  return h("div", {},
    h("div", { class: "card-head" }, h("h2", {}, `Trajectory ${t.id}`),
      h("span", { class: "muted" }, `${t.task_id} · ${t.policy} · ${t.stage} / ${t.source}${t.step !== null ? ` · step ${t.step}` : ""}`),
      link("compare on this task", route("compare", { task_id: t.task_id, left: t.id })),
      link("this task's trajectories", route("trajectories", { task: t.task_id }))),
    trajectoryBody(t));
}

// --- base vs trained ------------------------------------------------------------------------------------------------

async function compareView(params) {
  const found = await api.compare(params.task_id || "");
  const rows = found.rows;
  if (!rows.length) return h("p", { class: "muted" }, `No trajectory of task ${params.task_id}.`);
  const byId = new Map(rows.map((r) => [String(r.id), r]));
  // Defaults: the base policy on the left; on the right another policy's trajectory of the same stage and sample.
  const left = byId.get(params.left) || rows.find((r) => r.policy === "base") || rows[0];
  const other = (r) => r.policy !== left.policy;
  const right = byId.get(params.right)
    || rows.find((r) => other(r) && r.stage === left.stage && r.sample_index === left.sample_index)
    || rows.find((r) => other(r) && r.stage === left.stage)
    || rows.find(other)
    || rows.find((r) => r.id !== left.id) || left;
  const pick = (side, r) => h("input", { type: "radio", name: side, checked: (side === "left" ? left : right).id === r.id,
    onchange: () => { location.hash = route("compare", { task_id: found.task_id, left: side === "left" ? r.id : left.id, right: side === "right" ? r.id : right.id }); } });
  const chooser = table(["left", "right", "id", "policy", "stage", "source", "sample", "reward", "passed", "tokens", "turns"],
    rows.map((r) => [pick("left", r), pick("right", r), link(String(r.id), `#/t/${r.id}`), r.policy, r.stage, r.source,
      fmt(r.sample_index), fmt(r.reward), r.passed ? badge("pass", "pass") : badge("fail", "fail"), fmt(r.n_tokens), fmt(r.n_turns)]),
    { class: "chooser" });
  const [a, b] = await Promise.all([api.trajectory(left.id), api.trajectory(right.id)]);
  const column = (t) => h("div", { class: "compare-side" }, h("h3", {}, `${t.policy} · #${t.id} · ${t.stage} / ${t.source}`), trajectoryBody(t));
  return h("div", {}, h("h2", {}, `Task ${found.task_id}: side by side`), h("details", { open: rows.length <= 12 },
    h("summary", {}, `${rows.length} trajectories of this task: pick two`), chooser), h("div", { class: "side" }, column(a), column(b)));
}

// --- de-risk: tools -------------------------------------------------------------------------------------------------

function rateCell(value, hash) {
  const text = pct(value);
  const node = hash && value ? link(text, hash) : h("span", {}, text);
  if (value && value > 0.05) node.classList.add("rate-bad");
  return node;
}

const UNKNOWN_TOOL = "unknown tool";

// Calls of names no app serves and no oracle or probe called: tools the model invented. One row below the real tools
// (a model error, RL's to fix), not each name as a tool failing 100 % of the time above them.
function unknownTools(unknown, to) {
  const names = unknown.names.map((n, i) => [i ? ", " : "",
    n.in_trajectories ? link(n.tool, to({ tool: n.tool })) : n.tool, ` (${fmt(n.calls)})`]);
  return h("div", { class: "unknown" },
    h("h3", {}, "Tools the model invented"),
    h("p", { class: "muted" }, "Calls of tool names no app serves and no oracle or probe called: model errors, not tool failures."),
    table(["tool", "calls", "in trajectories", "failures", "failure rate", "names it called"],
      [[h("b", {}, UNKNOWN_TOOL), fmt(unknown.calls), fmt(unknown.in_trajectories), fmt(unknown.failures),
        rateCell(unknown.failure_rate), h("span", {}, names)]],
      { numeric: [1, 2, 3, 4], class: "unknown-tools" }));
}

async function toolsView(params) {
  const stages = state.overview.stages.map((s) => s.stage);
  // No stage in the address: de-risk's when the run has one; "all" reads every stage's calls.
  const chosen = params.stage || (stages.includes("derisk") ? "derisk" : "all");
  const stage = chosen === "all" ? "" : chosen;
  const report = await api.tools(stage);
  const to = (extra) => route("trajectories", { stage: stage || null, ...extra });
  const select = h("select", { name: "stage", onchange: (e) => { location.hash = route("tools", { stage: e.target.value }); } },
    h("option", { value: "all" }, "all stages"), stages.map((s) => h("option", { value: s, selected: s === stage }, s)));
  const gate = state.overview.stages.find((s) => s.stage === stage);
  const toolRows = report.tools.map((t) => [h("b", {}, t.tool),
    t.in_trajectories ? link(fmt(t.calls), to({ tool: t.tool })) : fmt(t.calls), fmt(t.in_trajectories),
    t.failures && t.in_trajectories ? link(fmt(t.failures), to({ tool: t.tool, call: "failed" })) : fmt(t.failures),
    rateCell(t.failure_rate), rateCell(t.known_good_failure_rate), rateCell(t.model_failure_rate),
    rateCell(t.empty_rate, t.in_trajectories ? to({ tool: t.tool, call: "empty" }) : null),
    rateCell(t.timeout_rate, t.in_trajectories ? to({ tool: t.tool, call: "timeout" }) : null),
    `${fmt(t.latency_mean)} s`, `${fmt(t.latency_p95)} s`, t.top_signature || "–"]);
  const signatureRows = report.signatures.map((s) => [s.signature || "(none)", s.tool || h("i", {}, UNKNOWN_TOOL), s.source,
    s.in_trajectories && s.tool ? link(fmt(s.calls), to(s.signature ? { tool: s.tool, call_error: s.signature } : { tool: s.tool, call: "failed" })) : fmt(s.calls),
    s.in_trajectories ? fmt(s.in_trajectories) : h("span", { class: "muted" }, "0 (oracle / probe calls)"),
    expandable(s.example, 120), s.advice || "–"]);
  return h("div", {},
    h("div", { class: "card-head" }, h("h2", {}, "De-risk: tools"), h("label", {}, "stage ", select)),
    gate && gate.findings.length ? h("div", { class: "card" }, h("h3", {}, `Findings of the ${stage} gate`), findingsList(gate.findings, stage)) : null,
    h("p", { class: "muted" }, "Failure rate over all calls; known-good = oracle steps and probes (a failure there is the tool's); model = the policy's own calls. Empty = successful calls that returned nothing. Numbers link to the trajectories behind them."),
    report.tools.length ? table(["tool", "calls", "in trajectories", "failures", "failure rate", "known-good failure", "model failure",
      "empty on success", "timeouts", "latency mean", "latency p95", "top signature"], toolRows, { numeric: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], class: "tools" })
      : h("p", { class: "muted" }, "No tool calls recorded for this stage."),
    report.unknown ? unknownTools(report.unknown, to) : null,
    h("h3", {}, "Top error signatures"),
    report.signatures.length ? table(["signature", "tool", "source", "calls", "in trajectories", "example", "advice"], signatureRows, { numeric: [3], class: "signatures" })
      : h("p", { class: "muted" }, "No failed tool call."));
}

// --- curves and tables ----------------------------------------------------------------------------------------------

const PALETTE = ["#1d5fbf", "#c0392b", "#2f9e55", "#b7791f", "#7c3aed", "#0e7490", "#be185d", "#4b5563", "#65a30d",
  "#ea580c"];

// n colours, all different: the palette while it lasts, else hues spread evenly around the wheel.
function seriesColors(n) {
  if (n <= PALETTE.length) return PALETTE.slice(0, n);
  return Array.from({ length: n }, (_, i) => `hsl(${Math.round((360 * i) / n)}, 70%, 40%)`);
}

// A line as the legend's swatch (an SVG attribute, not a style: the page's CSP allows no inline style).
function swatch(color, dashed) {
  return svg("svg", { width: 24, height: 10 },
    svg("line", { x1: 0, y1: 5, x2: 24, y2: 5, stroke: color, "stroke-width": 3, "stroke-dasharray": dashed ? "5 3" : "none" }));
}

// One chart; its legend is a list under it that wraps, so every series is named whatever their number.
function lineChart(title, series, yLabel) {
  const width = 600, height = 260, m = { left: 48, right: 24, top: 28, bottom: 40 };
  const points = series.flatMap((s) => s.points.filter((p) => p[1] !== null));
  const chart = svg("svg", { width, height, class: "chart", role: "img", "aria-label": title });
  chart.appendChild(svg("text", { x: m.left, y: 18, class: "title" }, title));
  const box = h("div", { class: "chart" }, chart);
  if (!points.length) {
    chart.appendChild(svg("text", { x: m.left, y: height / 2 }, "no data"));
    return box;
  }
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const y0 = Math.min(0, ...ys), y1 = Math.max(1, ...ys);
  const X = (x) => m.left + ((x - x0) / (x1 - x0)) * (width - m.left - m.right);
  const Y = (y) => height - m.bottom - ((y - y0) / (y1 - y0)) * (height - m.top - m.bottom);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    chart.appendChild(svg("line", { x1: m.left, x2: width - m.right, y1: Y(y), y2: Y(y), stroke: "#e5e7eb" }));
    chart.appendChild(svg("text", { x: m.left - 6, y: Y(y) + 4, "text-anchor": "end" }, fmt(Number(y.toFixed(2)))));
  }
  const every = Math.max(1, Math.ceil((x1 - x0) / 6));
  for (let x = Math.ceil(x0); x <= x1; x += every) {
    chart.appendChild(svg("text", { x: X(x), y: height - m.bottom + 16, "text-anchor": "middle" }, fmt(x)));
  }
  chart.appendChild(svg("text", { x: width / 2, y: height - m.bottom + 32, "text-anchor": "middle" }, "step"));
  chart.appendChild(svg("text", { x: 12, y: m.top + (height - m.top - m.bottom) / 2, transform: `rotate(-90 12 ${m.top + (height - m.top - m.bottom) / 2})`, "text-anchor": "middle" }, yLabel));
  const colors = seriesColors(series.length);
  series.forEach((s, i) => {
    const color = colors[i];
    const group = chart.appendChild(svg("g", { "data-series": s.name, stroke: color }));
    const valid = s.points.filter((p) => p[1] !== null);
    if (valid.length > 1) {
      group.appendChild(svg("polyline", { points: valid.map((p) => `${X(p[0])},${Y(p[1])}`).join(" "), fill: "none", "stroke-width": 2, "stroke-dasharray": s.dashed ? "5 4" : "none" }));
    }
    for (const p of valid) {
      group.appendChild(svg("circle", { cx: X(p[0]), cy: Y(p[1]), r: s.dashed ? 3.5 : 2.5, fill: s.dashed ? "#fff" : color, "stroke-width": 2 },
        svg("title", {}, `${s.name} · step ${p[0]}: ${fmt(p[1])}`)));
    }
  });
  box.appendChild(h("ul", { class: "chart-legend" }, series.map((s, i) =>
    h("li", { "data-series": s.name, "data-color": colors[i] }, swatch(colors[i], s.dashed), s.name))));
  return box;
}

// A stage's steps as series: each run's train curve and, when it was evaluated, its eval points (dashed).
function seriesOf(steps, key, evalKey) {
  const runs = new Map();
  for (const s of steps) {
    if (!runs.has(s.run)) runs.set(s.run, []);
    runs.get(s.run).push(s);
  }
  const series = [];
  for (const [run, rows] of runs) {
    series.push({ name: `${run} train`, points: rows.map((r) => [r.step, r[key]]) });
    const evals = rows.filter((r) => r[evalKey] !== null);
    if (evals.length) series.push({ name: `${run} eval`, dashed: true, points: evals.map((r) => [r.step, r[evalKey]]) });
  }
  return series;
}

// One card per stage (in the run's order): its runs share a chart, and no stage's curves crowd another's.
function stageCurves(steps) {
  const order = state.overview.stages.map((s) => s.stage);
  const rank = (stage) => (order.includes(stage) ? order.indexOf(stage) : order.length);
  const stages = [...new Set(steps.map((s) => s.stage))].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1));
  return stages.map((stage) => {
    const rows = steps.filter((s) => s.stage === stage);
    return h("div", { class: "card", "data-curves": stage }, h("h3", {}, stage),
      h("div", { class: "charts" },
        lineChart(`${stage}: mean reward per step`, seriesOf(rows, "reward_mean", "eval_reward"), "reward"),
        lineChart(`${stage}: pass rate / Pass@1 per step`, seriesOf(rows, "pass_rate", "eval_pass_rate"), "pass rate")));
  });
}

// A stage's table as the catalog holds it. Headers wrap between words (snake_case names shown with spaces) and
// numbers stay whole, so a wide table (the ablation arms: 18 columns) fits a 1,280-px window instead of widening it.
function genericTable(rows) {
  let columns = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const ci = columns.includes("ci_low") && columns.includes("ci_high");
  if (ci) columns = columns.filter((c) => c !== "ci_low" && c !== "ci_high");
  const header = [...columns.map((c) => c.replaceAll("_", " ")), ...(ci ? ["95 % CI"] : [])];
  const numeric = columns.flatMap((c, i) => (rows.every((r) => r[c] === null || r[c] === undefined || typeof r[c] === "number") ? [i] : []));
  return table(header, rows.map((r) => {
    const cells = columns.map((c) => (c === "verdict" && r[c] ? badge(r[c], r[c] === "worse" ? "fail" : r[c] === "better" ? "pass" : "") : fmt(r[c])));
    if (ci) cells.push(r.ci_low === null || r.ci_low === undefined ? "–" : `[${fmt(r.ci_low)}, ${fmt(r.ci_high)}]`);
    return cells;
  }), { class: "stage-table", numeric: ci ? [...numeric, columns.length] : numeric });
}

async function curvesView() {
  const data = await api.curves();
  const evals = data.evals.length
    ? table(["stage", "suite", "policy", "tasks", "passes", "trials", "Pass@1", "mean reward"],
      data.evals.map((e) => [e.stage, e.suite, e.policy, fmt(e.tasks), fmt(e.passes), fmt(e.trials), fmt(e.pass_at_1), fmt(e.mean_reward)]),
      { numeric: [3, 4, 5, 6, 7], class: "evals" })
    : h("p", { class: "muted" }, "No eval recorded.");
  const tables = data.tables.map((t) => h("div", { class: "card", "data-table": `${t.stage}-${t.name}` },
    h("h3", {}, `${t.folder} · ${t.name}`), genericTable(t.rows)));
  return h("div", {}, h("h2", {}, "Curves"), data.steps.length ? stageCurves(data.steps) : h("p", { class: "muted" }, "No train step recorded."),
    h("h3", {}, "Evals (Pass@1 = mean pass over trials)"), evals,
    h("h2", {}, "Stage tables"), tables.length ? tables : h("p", { class: "muted" }, "No stage recorded a table (ablation arms, transfer suites)."));
}

// --- compare runs ---------------------------------------------------------------------------------------------------

async function runsView(params) {
  const others = await api.runs();
  const pick = h("select", { name: "with", onchange: (e) => { location.hash = route("runs", { with: e.target.value }); } },
    h("option", { value: "" }, others.length ? "choose a run…" : "no other run beside this one"),
    others.map((r) => h("option", { value: r.run_id, selected: r.run_id === params.with }, `${r.run_id} (${r.profile}, ${r.created_at})`)));
  const head = h("div", { class: "filters" }, h("label", {}, "compare this run (A) with (B) ", pick));
  if (!params.with) return h("div", {}, h("h2", {}, "Compare runs"), head);
  const data = await api.compareRuns(params.with);
  const tables = data.tables.map((t) => h("div", { class: "card", "data-table": t.heading },
    h("h3", {}, t.heading), table(t.header, t.rows, { class: "stage-table" })));
  const charts = data.curves.map((c) => lineChart(`${c.stage}: mean reward per step`,
    Object.entries(c.series).map(([name, points]) => ({ name, dashed: name.startsWith("B "), points })), "reward"));
  return h("div", { "data-compare": `${data.runs.A}-vs-${data.runs.B}` }, h("h2", {}, "Compare runs"), head,
    data.provenance.map((line) => h("p", { class: "muted" }, line)), tables,
    h("h3", {}, "Training curves (B dashed)"), charts.length ? h("div", { class: "charts" }, charts) : h("p", { class: "muted" }, "Neither run trained."));
}

start();
