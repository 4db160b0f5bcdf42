// The page of matching-serve: one pair (or a query and its candidates) through every served run, each run's
// prediction and alignment matrices as heat-maps on the same token axes, and the difference of two matrices.
// Plain JavaScript, no library: the page works offline. The server's answers are JSON (see docs/how-to/serving.md).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { runs: [], kind: "classify", answers: null, ranking: null, inputs: null };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

async function post(path, run, body) {
  const answer = await fetch(`${path}?run=${encodeURIComponent(run)}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await answer.json().catch(() => ({ error: `${answer.status} ${answer.statusText}` }));
  if (!answer.ok) throw new Error(data.error || `${answer.status} ${answer.statusText}`);
  return data;
}

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

// -- colours ------------------------------------------------------------------------------------------------------
function mix(c0, c1, t) {
  return c0.map((v, i) => Math.round(v + (c1[i] - v) * t));
}
const WHITE = [255, 255, 255], BLUE = [33, 102, 172], DEEP = [8, 48, 107], RED = [178, 24, 43];

// A scale: sequential (white to blue, from lo to hi) for weights, or diverging (blue below 0, red above, white at
// 0, symmetric in ±lim) for matrices that can take both signs.
function colour(scale, v) {
  let rgb;
  if (scale.signed) {
    const t = Math.max(-1, Math.min(1, v / scale.lim));
    rgb = t < 0 ? mix(WHITE, BLUE, -t) : mix(WHITE, RED, t);
  } else {
    const t = Math.max(0, Math.min(1, (v - scale.lo) / (scale.hi - scale.lo || 1)));
    rgb = t < 0.6 ? mix(WHITE, BLUE, t / 0.6) : mix(BLUE, DEEP, (t - 0.6) / 0.4);
  }
  return `rgb(${rgb.join(",")})`;
}

function extent(m) {
  let lo = Infinity, hi = -Infinity;
  for (const row of m) for (const v of row) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return [lo, hi];
}

// As visualize draws them: a matrix whose formula can take both signs (CoDA's tanh(E) and M), or of unknown
// formula with values outside [0, 1], on a diverging scale in ±max|v|; weights on [0, 1].
function scaleOf(m, range) {
  const [lo, hi] = extent(m);
  const signed = range ? range[0] < 0 : (lo < 0 || hi > 1);
  if (signed) return { signed, lim: Math.max(1e-6, Math.abs(lo), Math.abs(hi)) };
  return range ? { signed, lo: range[0], hi: range[1] } : { signed, lo: 0, hi: 1 };
}

function fmt(v) {
  return Math.abs(v) >= 1e-3 || v === 0 ? v.toFixed(4) : v.toExponential(3);
}

function legend(scale) {
  const ramp = el("canvas", { class: "ramp", width: 160, height: 10 });
  const ctx = ramp.getContext("2d");
  for (let x = 0; x < 160; x++) {
    const t = x / 159;
    ctx.fillStyle = scale.signed ? colour(scale, (2 * t - 1) * scale.lim) : colour(scale, scale.lo + t * (scale.hi - scale.lo));
    ctx.fillRect(x, 0, 1, 10);
  }
  const [left, right] = scale.signed ? [-scale.lim, scale.lim] : [scale.lo, scale.hi];
  const words = scale.signed ? "diverging: blue < 0 < red" : "sequential";
  return el("div", { class: "legend" }, el("span", { text: fmt(left) }), ramp, el("span", { text: fmt(right) }),
    el("span", { text: words }));
}

// -- heat-maps ----------------------------------------------------------------------------------------------------
function tokenHeader(cls, token, unknown) {
  const kind = token === "<null>" ? " null" : unknown ? " unknown" : "";
  const title = token === "<null>" ? "the NULL token" : unknown ? `${token} (unknown word: a hashed random vector)` : token;
  const th = el("th", { class: cls + kind, title });
  if (cls === "coltok") th.append(el("div", { text: token }));
  else th.textContent = token;
  return th;
}

// One table cell per (a token, b token): rows a's tokens, columns b's; data-i, data-j and data-v on every cell.
function heatmap(tokens, m, scale, caption, cell) {
  const table = el("table", { class: "heat", "data-rows": m.length, "data-cols": m[0].length });
  const head = el("tr", {}, el("th", { class: "axis", text: "a \\ b" }));
  tokens.b.forEach((t, j) => head.append(tokenHeader("coltok", t, tokens.unknownB[j])));
  table.append(head);
  m.forEach((row, i) => {
    const tr = el("tr", {}, tokenHeader("rowtok", tokens.a[i], tokens.unknownA[i]));
    row.forEach((v, j) => {
      const td = el("td", { "data-i": i, "data-j": j, "data-v": v });
      td.style.background = colour(scale, v);
      td.style.width = td.style.height = `${cell}px`;
      tr.append(td);
    });
    table.append(tr);
  });
  table.addEventListener("mouseover", (event) => hover(event, table, tokens, caption));
  table.addEventListener("mouseleave", () => { $("tip").hidden = true; mark(table, null); });
  return table;
}

function mark(table, td) {
  for (const th of table.querySelectorAll("th.on")) th.classList.remove("on");
  if (!td) return;
  const rows = table.rows;
  rows[0].cells[Number(td.dataset.j) + 1].classList.add("on");
  rows[Number(td.dataset.i) + 1].cells[0].classList.add("on");
}

function hover(event, table, tokens, caption) {
  const td = event.target.closest("td");
  const tip = $("tip");
  if (!td) { tip.hidden = true; mark(table, null); return; }
  const i = Number(td.dataset.i), j = Number(td.dataset.j);
  tip.textContent = `a[${i}] ${tokens.a[i]}  ×  b[${j}] ${tokens.b[j]}\n${caption}\n= ${Number(td.dataset.v)}`;
  tip.hidden = false;
  const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
  tip.style.left = `${x}px`;
  tip.style.top = `${event.clientY + 16}px`;
  mark(table, td);
}

function cellSize(columnWidth, cols) {
  return Math.max(9, Math.min(30, Math.floor((columnWidth - 130) / cols)));
}

// -- one run's column ---------------------------------------------------------------------------------------------
function tokensOf(answer) {
  return { a: answer.a_tokens, b: answer.b_tokens, unknownA: answer.unknown.a, unknownB: answer.unknown.b };
}

// A cross-alignment matrix has a's tokens down the side and b's along the top; an intra-sentence one
// ("intra_a/...", "intra_b/...") one side's tokens on both axes.
function axesOf(name, tokens) {
  const side = name.startsWith("intra_b/") ? "B" : name.startsWith("intra_a/") ? "A" : null;
  if (!side) return tokens;
  const words = side === "A" ? tokens.a : tokens.b, unknown = side === "A" ? tokens.unknownA : tokens.unknownB;
  return { a: words, b: words, unknownA: unknown, unknownB: unknown };
}

function prediction(run, answer) {
  const box = el("div", { class: "prediction" });
  if (run.kind === "rank") {
    box.append(el("div", { class: "label", text: `P(match) ${answer.p_match.toFixed(3)}` }),
      el("div", { class: "hint", text: `score ${answer.score >= 0 ? "+" : ""}${answer.score.toFixed(3)} (logit margin, what candidates are ranked by)` }));
    return box;
  }
  box.append(el("div", { class: "label", "data-label": answer.label, text: answer.label }));
  const bars = el("div", { class: "bars" });
  for (const [label, p] of Object.entries(answer.probs).sort((x, y) => y[1] - x[1])) {
    const fill = el("span");
    fill.style.width = `${(100 * p).toFixed(1)}%`;
    bars.append(el("span", { text: label }), el("div", { class: "bar" }, fill), el("span", { text: p.toFixed(3) }));
  }
  box.append(bars);
  return box;
}

function describeRun(run) {
  const bits = [run.task, `aligner ${run.aligner}`, run.intra && run.intra !== "none" ? `intra ${run.intra}` : null, `embeddings ${run.embeddings}`,
    run.null_token ? "NULL token" : null, run.data && run.data.train ? `trained on ${run.data.train}` : null];
  return bits.filter(Boolean).join(" · ");
}

function runColumn(run, answer, width) {
  const column = el("div", { class: "run", "data-run": run.name });
  column.append(el("h2", { text: run.name }), el("div", { class: "what", text: `${describeRun(run)} — ${run.checkpoint}` }));
  if (answer.error) {
    column.append(el("p", { class: "error", text: answer.error }));
    return column;
  }
  column.append(prediction(run, answer));
  if (!answer.matrices) {
    column.append(el("p", { class: "hint", text: answer.note }));
    return column;
  }
  const tokens = tokensOf(answer);
  const matrices = el("div", { class: "matrices" });
  column.append(matrices);
  for (const [name, m] of Object.entries(answer.matrices)) {
    const about = answer.about[name] || { caption: name, range: null };
    const scale = scaleOf(m, about.range);
    const box = el("div", { class: "matrix", "data-matrix": name });
    box.append(el("h3", {}, `${about.caption} `, el("span", { class: "name", text: name })));
    const axes = axesOf(name, tokens);
    box.append(el("div", { class: "scroll" }, heatmap(axes, m, scale, about.caption, cellSize(width, axes.b.length))));
    box.append(legend(scale));
    matrices.append(box);
  }
  return column;
}

// -- the difference of two matrices -------------------------------------------------------------------------------
// Cells are matched by position; the runs must see the same tokens. A NULL token that only one run has is left out.
function withoutNull(answer, m) {
  const a0 = answer.a_tokens[0] === "<null>" ? 1 : 0, b0 = answer.b_tokens[0] === "<null>" ? 1 : 0;
  return {
    tokens: { a: answer.a_tokens.slice(a0), b: answer.b_tokens.slice(b0), unknownA: answer.unknown.a.slice(a0), unknownB: answer.unknown.b.slice(b0) },
    m: m.slice(a0).map((row) => row.slice(b0)),
  };
}

function defaultMatrix(answer) {
  const names = Object.keys(answer.matrices).filter((n) => !n.includes("/"));
  return names.find((n) => n === "M") || names.find((n) => n.endsWith("_a")) || names[0];
}

function differenceView(width) {
  const section = $("difference");
  section.replaceChildren();
  const usable = state.runs.filter((r) => state.answers[r.name] && !state.answers[r.name].error && state.answers[r.name].matrices);
  if (usable.length < 2) { section.hidden = true; return; }
  section.hidden = false;
  const options = [];
  for (const run of usable) {
    for (const name of Object.keys(state.answers[run.name].matrices)) if (!name.includes("/")) options.push([run.name, name]);
  }
  const pick = (id, run) => {
    const select = el("select", { id });
    options.forEach(([r, n], k) => select.append(el("option", { value: k, text: `${r}: ${n}` })));
    select.value = String(options.findIndex(([r, n]) => r === run.name && n === defaultMatrix(state.answers[run.name])));
    select.addEventListener("change", () => draw());
    return select;
  };
  const selectA = pick("diff-a", usable[0]), selectB = pick("diff-b", usable[1]);
  const body = el("div");
  section.append(el("h2", { text: "Difference" }),
    el("div", { class: "row" }, el("span", { text: "B" }), selectB, el("span", { text: "− A" }), selectA,
      el("span", { class: "note", text: "cell by cell, on the same token axes" })), body);
  function draw() {
    const [runA, nameA] = options[Number(selectA.value)], [runB, nameB] = options[Number(selectB.value)];
    const ansA = state.answers[runA], ansB = state.answers[runB];
    let x = { tokens: tokensOf(ansA), m: ansA.matrices[nameA] }, y = { tokens: tokensOf(ansB), m: ansB.matrices[nameB] };
    let note = null;
    if (ansA.a_tokens.length !== ansB.a_tokens.length || ansA.b_tokens.length !== ansB.b_tokens.length) {
      x = withoutNull(ansA, x.m);
      y = withoutNull(ansB, y.m);
      note = "the NULL token's row and column are left out: only one of the two runs has it";
    }
    const same = JSON.stringify([x.tokens.a, x.tokens.b]) === JSON.stringify([y.tokens.a, y.tokens.b]);
    body.replaceChildren();
    if (!same) {
      body.append(el("p", { class: "note", text: `the two runs tokenise this pair differently (${x.tokens.a.join(" ")} | ${x.tokens.b.join(" ")} against ${y.tokens.a.join(" ")} | ${y.tokens.b.join(" ")}): no cell-by-cell difference` }));
      return;
    }
    const diff = y.m.map((row, i) => row.map((v, j) => v - x.m[i][j]));
    const scale = scaleOf(diff, [-1, 1]);
    const caption = `${runB}: ${nameB} − ${runA}: ${nameA}`;
    if (note) body.append(el("p", { class: "note", text: note }));
    body.append(el("div", { class: "matrix", "data-matrix": "difference" }, el("h3", { text: caption }),
      el("div", { class: "scroll" }, heatmap(x.tokens, diff, scale, caption, cellSize(width, x.tokens.b.length))), legend(scale)));
  }
  draw();
}

// -- inputs, the URL and the JSON download ------------------------------------------------------------------------
function readInputs() {
  if (state.kind === "rank") {
    const candidates = $("candidates").value.split("\n").map((c) => c.trim()).filter(Boolean);
    return { query: $("query").value.trim(), candidates, pick: state.inputs?.pick ?? null };
  }
  return { a: $("a").value.trim(), b: $("b").value.trim() };
}

function writeInputs(inputs) {
  if (state.kind === "rank") {
    $("query").value = inputs.query || "";
    $("candidates").value = (inputs.candidates || []).join("\n");
  } else {
    $("a").value = inputs.a || "";
    $("b").value = inputs.b || "";
  }
}

function inputsFromUrl() {
  const params = new URLSearchParams(location.search);
  if (state.kind === "rank") {
    if (!params.has("query")) return null;
    const pick = params.get("pick");
    return { query: params.get("query"), candidates: params.getAll("c"), pick: pick === null ? null : Number(pick) };
  }
  return params.has("a") && params.has("b") ? { a: params.get("a"), b: params.get("b") } : null;
}

function remember(inputs) {
  const params = new URLSearchParams();
  if (state.kind === "rank") {
    params.set("query", inputs.query);
    for (const c of inputs.candidates) params.append("c", c);
    if (inputs.pick != null) params.set("pick", inputs.pick);
  } else {
    params.set("a", inputs.a);
    params.set("b", inputs.b);
  }
  history.replaceState(null, "", `${location.pathname}?${params}`);
  $("link").href = location.href;
  const runs = state.runs.map((run) => {
    const { examples, ...info } = run;
    return { ...info, answer: state.answers?.[run.name] ?? null };
  });
  const blob = new Blob([JSON.stringify({ url: location.href, inputs, ranking: state.ranking, runs }, null, 1)],
    { type: "application/json" });
  if ($("download").href.startsWith("blob:")) URL.revokeObjectURL($("download").href);
  $("download").href = URL.createObjectURL(blob);
}

// -- the flow -----------------------------------------------------------------------------------------------------
function columnWidth() {
  const n = Math.max(1, state.runs.length);
  return Math.max(280, ($("results").clientWidth - 18 * (n - 1)) / n);
}

async function alignPair(a, b) {
  // A model served on ONNX Runtime has no /align (its graph returns the logits only): its prediction, and a note
  const ask = (run) => (run.endpoints || ["/align"]).includes("/align")
    ? post("/align", run.name, { a, b })
    : post("/classify", run.name, { pairs: [{ a, b }] }).then((r) => ({ ...r.predictions[0], matrices: null,
      note: `no alignment matrices: this model runs on ${run.backend}, whose exported graph returns the logits only; serve it with backend=torch to see them` }));
  const answers = await Promise.all(state.runs.map((run) => ask(run).catch((err) => ({ error: err.message }))));
  state.answers = Object.fromEntries(state.runs.map((run, k) => [run.name, answers[k]]));
  const width = columnWidth();
  $("pair").replaceChildren(el("b", { text: `${state.names.a} ` }), a, el("br"), el("b", { text: `${state.names.b} ` }), b);
  $("pair").hidden = false;
  $("results").replaceChildren(...state.runs.map((run) => runColumn(run, state.answers[run.name], width)));
  differenceView(Math.min($("results").clientWidth, 2 * width));
  const failed = answers.find((x) => x.error);
  return failed ? failed.error : null;
}

function rankingTable(inputs, rankings) {
  const section = $("ranking");
  const first = rankings[0].ranking;
  const head = el("tr", {}, el("th", { text: "candidate (b)" }));
  for (const run of state.runs) head.append(el("th", { text: `${run.name}: rank` }), el("th", { text: "score" }), el("th", { text: "P(match)" }));
  const table = el("table", {}, head);
  for (const entry of first) {
    const tr = el("tr", { class: "cand" + (entry.index === inputs.pick ? " picked" : ""), "data-index": entry.index,
      title: "align this candidate with the query", onclick: () => go({ ...readInputs(), pick: entry.index }) });
    tr.append(el("td", { text: entry.candidate }));
    rankings.forEach(({ ranking }) => {
      const k = ranking.findIndex((r) => r.index === entry.index);
      tr.append(el("td", { class: "num", text: String(k + 1) }), el("td", { class: "num", text: ranking[k].score.toFixed(3) }),
        el("td", { class: "num", text: ranking[k].p_match.toFixed(3) }));
    });
    table.append(tr);
  }
  section.replaceChildren(el("h2", { text: "Ranking" }),
    el("div", { class: "hint", text: `best first by ${state.runs[0].name}; click a candidate to see its alignment with the query below` }), table);
  section.hidden = false;
}

async function go(inputs = readInputs()) {
  state.inputs = inputs;
  const missing = state.kind === "rank" ? (!inputs.query ? "the query" : inputs.candidates.length ? null : "a candidate")
    : (!inputs.a ? "text a" : !inputs.b ? "text b" : null);
  if (missing) { setStatus(`type ${missing} first`, true); return; }
  $("go").disabled = true;
  setStatus("asking the models…");
  try {
    let a = inputs.a, b = inputs.b;
    if (state.kind === "rank") {
      const rankings = await Promise.all(state.runs.map((run) =>
        post("/rank", run.name, { query: inputs.query, candidates: inputs.candidates })));
      state.ranking = Object.fromEntries(state.runs.map((run, k) => [run.name, rankings[k].ranking]));
      if (inputs.pick == null || !(inputs.pick < inputs.candidates.length)) inputs.pick = rankings[0].ranking[0].index;
      rankingTable(inputs, rankings);
      a = inputs.query;
      b = inputs.candidates[inputs.pick];
    }
    const error = await alignPair(a, b);
    remember(inputs);
    setStatus(error ? `a model refused the pair: ${error}` : "", Boolean(error));
  } catch (err) {
    setStatus(err.message, true);
  } finally {
    $("go").disabled = false;
  }
}

function short(text, n = 48) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

function showExamples(examples) {
  const box = $("examples");
  box.replaceChildren();
  if (!examples.length) { $("examples-row").hidden = true; return; }
  for (const example of examples) {
    const rank = !Array.isArray(example);
    const inputs = rank ? { query: example.query, candidates: example.candidates, pick: null } : { a: example[0], b: example[1] };
    // A pair's chip shows the start of both texts, so that two pairs with the same a still look different; the
    // title has them whole, and the gold label of a pair kept from the run's own dev data.
    const title = rank ? `${example.query}\n${example.candidates.join("\n")}`
      : `a: ${example[0]}\nb: ${example[1]}` + (example[2] != null ? `\nlabel in the data: ${example[2]}` : "");
    box.append(el("button", { type: "button", title, text: rank ? short(example.query) : `${short(example[0], 26)} / ${short(example[1], 26)}`,
      onclick: () => { writeInputs(inputs); go(inputs); } }));
  }
}

async function start() {
  const info = await (await fetch("/info")).json();
  state.runs = info.runs;
  state.kind = state.runs[0].kind;
  $("runs").replaceChildren(...state.runs.map((run) => el("li", {}, el("b", { text: run.name }), ` — ${describeRun(run)} — ${run.checkpoint}`)));
  $("pair-input").hidden = state.kind === "rank";
  $("rank-input").hidden = state.kind !== "rank";
  $("results").style.gridTemplateColumns = `repeat(${state.runs.length}, minmax(0, 1fr))`;
  if (state.runs[0].task.includes("nli") || state.runs[0].task === "scitail") {
    $("a-hint").textContent = "premise";
    $("b-hint").textContent = "hypothesis";
  }
  // The texts under the run's own names (a run trained on claim/evidence columns calls them so)
  const own = state.runs[0].columns || {};
  state.names = { a: own.a || "a", b: own.b || "b" };
  if (own.a) $("a-hint").textContent = own.a;
  if (own.b) $("b-hint").textContent = own.b;
  if (state.runs[0].examples_from) $("examples-from").textContent = `examples (${state.runs[0].examples_from}):`;
  showExamples(state.runs[0].examples || []);
  $("go").addEventListener("click", () => go({ ...readInputs(), pick: null }));
  for (const id of ["a", "b", "query"]) {
    $(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); go({ ...readInputs(), pick: null }); }
    });
  }
  const fromUrl = inputsFromUrl();
  if (fromUrl) { writeInputs(fromUrl); await go(fromUrl); }
  document.body.dataset.ready = "true";
}

start().catch((err) => setStatus(`cannot reach the server: ${err.message}`, true));
