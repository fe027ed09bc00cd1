// The tuning page: one fetch per strategy (columns fill as each finishes), judgments
// saved on click, and the scoreboard re-read after every judgment. No libraries, no CDN.
"use strict";

const METRICS = ["Hit@1", "Hit@5", "R@2", "R@5", "R@10", "R@20", "MRR", "mAP", "nDCG@10"];
const KIND_TITLES = {
  strategy: "Strategies",
  baseline: "Baselines (the seed papers')",
  ablation: "Ablations",
};
const $ = (id) => document.getElementById(id);
let current = { kb: null, query: null, judgments: {} };

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "onclick") node.addEventListener("click", value);
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: body ? { "content-type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const answer = await response.json();
  if (!response.ok) {
    const reason = answer.error ? answer.error.reason || answer.error.type : response.statusText;
    throw new Error(`${response.status}: ${reason}`);
  }
  return answer;
}

async function loadOptions() {
  const { kbs, strategies, selected, llm_call_cost } = await call("GET", "/_kgqr/tune/options");
  $("kb").replaceChildren(...kbs.map((kb) => element("option", { value: kb }, kb)));
  // One row per kind, those to choose from first; an LLM strategy says what it costs.
  const rows = Object.entries(KIND_TITLES).map(([kind, title]) => {
    const boxes = strategies.filter((s) => s.kind === kind).map((strategy) => {
      const box = element("input", { type: "checkbox", name: "strategy", value: strategy.name });
      box.checked = selected.includes(strategy.name);
      const cost = strategy.llm_calls
        ? element("small", { class: "llm", title: `each LLM call ${llm_call_cost}` },
                  ` (${strategy.llm_calls} LLM call${strategy.llm_calls > 1 ? "s" : ""})`)
        : "";
      return element("label", {}, box, strategy.name, cost);
    });
    return element("div", { class: `kind ${kind}` }, element("span", {}, `${title}: `), ...boxes);
  });
  $("strategies").replaceChildren(element("legend", {}, "Strategies"), ...rows);
  $("kb").addEventListener("change", refreshScoreboard);
  await refreshScoreboard();
}

function judgmentClass(docId) {
  const grade = current.judgments[docId];
  if (grade === undefined) return "";
  return grade > 0 ? "relevant" : "not-relevant";
}

function paintJudgments() {
  for (const item of document.querySelectorAll("li[data-doc]")) {
    item.className = judgmentClass(item.dataset.doc);
  }
}

async function judge(docId, relevant) {
  const { kb, query } = current;
  await call("POST", "/_kgqr/tune/judgments", { kb, query, doc_id: docId, relevant });
  current.judgments[docId] = relevant ? 1 : 0;
  paintJudgments();
  await refreshScoreboard();
}

function hitItem(hit) {
  const judgeButtons = element(
    "span", { class: "judge" },
    element("button", { type: "button", class: "mark-relevant", onclick: () => judge(hit.id, true) }, "relevant"),
    element("button", { type: "button", class: "mark-not-relevant", onclick: () => judge(hit.id, false) }, "not relevant"),
  );
  return element(
    "li", { "data-doc": hit.id, class: judgmentClass(hit.id) },
    element("div", { class: "hit-title" }, hit.title || hit.id),
    element("div", { class: "hit-id" }, `${hit.id} · ${hit.type || ""} · score ${Number(hit.score).toFixed(3)}`),
    element("div", { class: "snippet" }, hit.snippet || ""),
    judgeButtons,
  );
}

function column(strategy) {
  const node = element("article", { class: "column", "data-strategy": strategy },
    element("h2", {}, strategy), element("p", { class: "timing" }, "running…"));
  $("results").append(node);
  return node;
}

function fillColumn(node, result) {
  const explain = result.explain;
  const stages = Object.entries(explain.stages_ms || {}).map(([s, ms]) => `${s} ${ms.toFixed(0)}`).join(", ");
  const parts = [
    element("h2", {}, result.strategy),
    element("p", { class: "timing" }, explain.cached
      ? `${result.total_ms.toFixed(0)} ms: rewrite from the cache (first run took ${stages})`
      : `${result.total_ms.toFixed(0)} ms (${stages}); LLM calls ${explain.llm_calls}, cached ${explain.cached_llm_calls}`),
  ];
  if (explain.fallback) {
    parts.push(element("p", { class: "fallback" }, `fell back at ${explain.fallback.stage}: ${explain.fallback.reason}`));
  }
  if (!result.recorded) {
    parts.push(element("p", { class: "fallback" }, `not on the scoreboard: ${result.not_recorded}`));
  }
  if (explain.expansions && explain.expansions.length) {
    parts.push(element("details", {}, element("summary", {}, `expansions (${explain.expansions.length})`),
      element("pre", {}, explain.expansions.join("\n\n"))));
  }
  if (explain.details && Object.keys(explain.details).length) {
    parts.push(element("details", {}, element("summary", {}, "entities, triples and other details"),
      element("pre", {}, JSON.stringify(explain.details, null, 1))));
  }
  parts.push(element("ol", { class: "hits" }, ...result.hits.map(hitItem)));
  node.replaceChildren(...parts);
}

async function compare(event) {
  event.preventDefault();
  const kb = $("kb").value;
  const query = $("query").value.trim();
  const size = Number($("size").value) || 10;
  const fuse = $("fuse").checked;
  const strategies = [...document.querySelectorAll("input[name=strategy]:checked")].map((b) => b.value);
  if (!kb || !query || !strategies.length) {
    $("status").textContent = "Choose a knowledge base, type a query and tick at least one strategy.";
    return;
  }
  const saved = await call("GET", `/_kgqr/tune/judgments?kb=${encodeURIComponent(kb)}&query=${encodeURIComponent(query)}`);
  current = { kb, query, judgments: saved.judgments };
  $("results").replaceChildren();
  $("status").textContent = `Running ${strategies.length} strategies…`;
  let done = 0;
  await Promise.all(strategies.map(async (strategy) => {
    const node = column(fuse ? `${strategy} fused` : strategy);
    try {
      fillColumn(node, await call("POST", "/_kgqr/tune/search", { kb, query, strategy, size, fuse }));
    } catch (error) {
      node.querySelector(".timing").textContent = `failed: ${error.message}`;
    }
    done += 1;
    $("status").textContent = `${done} of ${strategies.length} strategies done.`;
  }));
  await refreshScoreboard();
}

async function refreshScoreboard() {
  const kb = $("kb").value;
  if (!kb) return;
  $("download-judgments").href = `/_kgqr/tune/judgments.jsonl?kb=${encodeURIComponent(kb)}`;
  const board = await call("GET", `/_kgqr/tune/metrics?kb=${encodeURIComponent(kb)}`);
  const scored = board.strategies.filter((row) => row.queries > 0);
  $("scoreboard-note").textContent = scored.length
    ? `${board.judged_queries} judged queries on ${kb}; a query counts once one hit is marked relevant.`
    : "No judged queries yet.";
  const head = element("tr", {}, element("th", {}, "strategy"), element("th", {}, "queries"),
    ...METRICS.map((m) => element("th", {}, m)), element("th", {}, "against base"));
  $("metrics").tHead.replaceChildren(head);
  $("metrics").tBodies[0].replaceChildren(...scored.map((row) => element(
    "tr", { "data-strategy": row.strategy },
    element("td", {}, row.strategy), element("td", {}, String(row.queries)),
    ...METRICS.map((m) => element("td", { "data-metric": m }, (100 * row.metrics[m]).toFixed(1))),
    element("td", { class: "against-base" }, row.against_base.map(againstBase).join("; ")),
  )));
}

// "R@5 +6.9 [+1.2, +12.0] 9/2 better": an interval holding 0 is not a win.
function againstBase(c) {
  const points = (x) => `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)}`;
  return `${c.metric} ${points(c.difference)} [${points(c.low)}, ${points(c.high)}] ` +
    `p=${c.p_value.toFixed(3)} ${c.wins}/${c.losses} ${c.verdict}`;
}

async function promote() {
  const kb = $("kb").value;
  try {
    const promoted = await call("POST", "/_kgqr/tune/promote", { kb });
    $("promoted").textContent = `${kb} now defaults to ${promoted.default.strategy} ` +
      `(v${promoted.default.version}): ${promoted.default.reason}`;
  } catch (error) {
    $("promoted").textContent = `Not promoted: ${error.message}`;
  }
}

$("query-form").addEventListener("submit", compare);
$("promote").addEventListener("click", promote);
loadOptions().catch((error) => { $("status").textContent = `Could not load options: ${error.message}`; });
