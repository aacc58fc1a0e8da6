// The gpucarve dashboard: one module, no framework, no build step. Everything is drawn with
// DOM calls from the JSON API (never by parsing markup: names come from tenants). State is said in
// text as well as colour. Live: /api/version is asked every POLL_MS; a new generation redraws.

const POLL_MS = 3000;
const STATE_NAMES = {
  free: "free", used: "in use", reserved: "reserved for a waiting gang",
  "out-of-service": "out of service", reconfiguring: "MIG change in flight", other: "held outside the policy",
  stranded: "in no MIG instance of the layout",
};
const STATES = ["reserved", "out-of-service", "reconfiguring", "other", "stranded", "free"];
let teams = [];
let token = sessionStorage.getItem("gpucarve-token") || "";
let shown = -1;

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "style") el.style.cssText = v;  // CSSOM: allowed by the page's CSP
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const fmt = (x, digits = 2) => (Number.isInteger(x) ? String(x) : x.toFixed(digits).replace(/\.?0+$/, ""));
const gib = (mib) => fmt(mib / 1024, 1);
// a cycle's time for people: the viewer's own time zone, to the second (the server sends ISO
// 8601; a simulation's page may carry its own clock's text, shown as it is)
function when(at) {
  const d = new Date(at);
  return Number.isNaN(d.getTime()) ? String(at) : d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}
// what DCGM measures on a GPU (`use`, where a Prometheus is configured), in words
function useText(u) {
  const parts = [];
  if (u.utilPercent !== undefined) parts.push(`${fmt(u.utilPercent, 1)} % busy`);
  if (u.memoryUsedMiB !== undefined) parts.push(`${gib(u.memoryUsedMiB)}${u.memoryTotalMiB ? ` of ${gib(u.memoryTotalMiB)}` : ""} GiB used`);
  return parts.join(" · ");
}
// where the GPU metrics come from, and why they are missing when Prometheus did not answer
function metricsNote(d) {
  if (!d.gpuMetrics) return null;
  return d.gpuMetrics.error ? h("p", { class: "error", id: "gpu-metrics" }, d.gpuMetrics.error)
    : h("p", { class: "muted", id: "gpu-metrics" }, `GPU use measured by DCGM, read from ${d.gpuMetrics.source}`);
}
const hours = (s) => (s < 3600 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`);
const teamClass = (t) => `team-${Math.max(0, teams.indexOf(t)) % 8}`;

class Unauthorized extends Error {}

async function api(path) {
  if (window.GPUCARVE_DATA) {  // a page written out with its answers (dashboard/export.py)
    const hit = window.GPUCARVE_DATA[path];
    if (hit === undefined) throw new Error(`${path}: not in this file (the live dashboard answers every page)`);
    return hit;
  }
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const r = await fetch(path, { headers });
  const body = await r.json().catch(() => ({ message: r.statusText }));
  if (r.status === 401) throw new Unauthorized(body.message);
  if (!r.ok) throw new Error(body.message || `${r.status}`);
  return body;
}

function table(head, rows, numeric = []) {
  return h("table", {},
    h("thead", {}, h("tr", {}, head.map((c, i) => h("th", { scope: "col", class: numeric.includes(i) ? "num" : null }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c))))));
}

function legend(items) {
  return h("div", { class: "legend" }, items.map(([cls, label]) => h("span", {}, h("i", { class: cls, "aria-hidden": "true" }), label)));
}

// ---------------------------------------------------------------- cluster
function poolBar(p) {
  const parts = [];
  for (const [t, n] of Object.entries(p.teams)) parts.push([teamClass(t), `${t}: ${fmt(n)} GPUs in use`, n]);
  for (const s of STATES) {
    const n = p.states[s] || 0;
    if (n > 0) parts.push([`state-${s}`, `${STATE_NAMES[s]}: ${fmt(n)} GPUs`, n]);
  }
  const total = p.gpus || 1;
  return h("div", { class: "bar", role: "img", "aria-label": parts.map((x) => x[1]).join("; ") },
    parts.map(([cls, label, n]) => h("span", { class: cls, title: label, style: `width:${(100 * n) / total}%` })));
}

async function clusterPage(main) {
  const c = await api("/api/cluster");
  teams = c.teams;
  main.append(h("h2", {}, "Pools"),
    legend([...teams.map((t) => [teamClass(t), t]), ...STATES.map((s) => [`state-${s}`, STATE_NAMES[s]])]));
  // every state a GPU can be in has its column: a pool's row adds up to its GPUs
  const rows = c.pools.map((p) => [
    h("a", { href: `#pool/${encodeURIComponent(p.name)}` }, p.name), p.model, p.sharing, p.nodes, p.gpus,
    fmt(p.states.used || 0), ...STATES.map((s) => fmt(p.states[s] || 0)), poolBar(p),
  ]);
  if (c.gpuMetrics) {
    const u = c.use || {};
    main.append(metricsNote(c), h("p", { id: "cluster-use" }, u.gpus ? `Measured: ${u.gpus} GPUs, ${useText(u)} on average and in all` : "No GPU measured yet."));
  }
  main.append(table(["Pool", "GPU model", "Sharing", "Nodes", "GPUs", "In use (GPUs)", ...STATES.map((s) => `${STATE_NAMES[s][0].toUpperCase()}${STATE_NAMES[s].slice(1)} (GPUs)`), "By team and state"], rows, [3, 4, 5, 6, 7, 8, 9, 10, 11]));
  // thousands of nodes: open one by name rather than paging to it
  const input = h("input", { id: "node-name", type: "text", required: true, autocomplete: "off", spellcheck: "false" });
  main.append(h("form", { class: "goto", onsubmit: (e) => { e.preventDefault(); redraw(`node/${input.value.trim()}`); } },
    h("label", { for: "node-name" }, "Open a node by name "), input, " ", h("button", { type: "submit" }, "Open")));
}

function gpuBox(g) {
  const out = g.outOfService !== undefined;
  const title = h("div", { class: "title" }, h("span", {}, `GPU ${g.index}`),
    h("span", {}, out ? "out of service" : g.reconfiguring ? "changing" : ""));
  const slices = g.slices.map((s) => {
    const who = s.state === "used" ? `${s.team}${s.workload ? ` ${s.workload}` : ""}` : STATE_NAMES[s.state];
    const label = `${s.label}: ${who}${s.reservedFor ? ` (${s.reservedFor})` : ""}`;
    return h("div", {
      class: `slice ${s.state === "used" ? teamClass(s.team) : `state-${s.state}`}`,
      style: `width:${100 * s.share}%`, title: label, "aria-label": label,
      "data-slice": s.id, "data-state": s.state, "data-team": s.team || null,
    }, s.label);
  });
  if (g.stranded) {
    const label = `${fmt(g.stranded, 3)} of the GPU ${STATE_NAMES.stranded}`;
    slices.push(h("div", { class: "slice state-stranded", style: `width:${100 * g.stranded}%`, title: label, "aria-label": label, "data-state": "stranded" }));
  }
  const use = g.use ? h("div", { class: "use", "data-util": g.use.utilPercent ?? null }, useText(g.use)) : null;
  return h("div", { class: `gpu${out ? " out" : ""}`, "data-gpu": g.id, title: out ? `out of service: ${g.outOfService}` : null },
    title, h("div", { class: "slices" }, slices), use, out ? h("div", { class: "muted", style: "font-size:.7rem;padding:0 .3rem" }, g.outOfService) : null);
}

function nodeBox(n) {
  return h("section", { class: "node", "data-node": n.name, "aria-label": `node ${n.name}` },
    h("h3", {}, h("a", { href: `#node/${encodeURIComponent(n.name)}` }, n.name), n.reservedFor ? ` — reserved for ${n.reservedFor}` : ""),
    h("div", { class: "gpus" }, n.gpus.map(gpuBox)));
}

async function poolPage(main, pool, offset = 0) {
  const p = await api(`/api/pools/${encodeURIComponent(pool)}?offset=${offset}`);
  const last = Math.min(p.total, p.offset + p.nodes.length);
  main.append(h("h2", {}, `Pool ${p.pool}: nodes ${p.total ? p.offset + 1 : 0}–${last} of ${p.total}`));
  const nav = h("p", {},
    p.offset > 0 ? h("button", { type: "button", onclick: () => redraw(`pool/${pool}/${Math.max(0, p.offset - 200)}`) }, "Previous nodes") : null, " ",
    last < p.total ? h("button", { type: "button", onclick: () => redraw(`pool/${pool}/${last}`) }, "Next nodes") : null);
  main.append(nav, metricsNote(p) || "", h("div", { class: "nodes" }, p.nodes.map(nodeBox)));
}

async function nodePage(main, name) {
  const n = await api(`/api/nodes/${encodeURIComponent(name)}`);
  main.append(h("h2", {}, `Node ${n.name} (pool ${n.pool})`), nodeBox(n));
  const rows = [];
  for (const g of n.gpus) {
    for (const s of g.slices) {
      rows.push([`GPU ${g.index}`, s.label, s.start ?? "", STATE_NAMES[s.state], s.team || "", s.workload || s.reservedFor || "", g.outOfService || ""]);
    }
  }
  main.append(table(["GPU", "Slice", "MIG start", "State", "Team", "Workload", "Out of service because"], rows));
  if (n.gpuMetrics) {
    main.append(h("h3", {}, "What the GPUs do (DCGM)"), metricsNote(n),
      table(["GPU", "Busy (%)", "Memory used (GiB)", "Memory (GiB)"], n.gpus.map((g) => {
        const u = g.use || {};
        return [`GPU ${g.index}`, u.utilPercent === undefined ? "not measured" : fmt(u.utilPercent, 1),
          u.memoryUsedMiB === undefined ? "" : gib(u.memoryUsedMiB), u.memoryTotalMiB === undefined ? "" : gib(u.memoryTotalMiB)];
      }), [1, 2, 3]));
  }
}

// ---------------------------------------------------------------- queues
function spark(points, queue, key, nominal) {
  // use over time, with the nominal quota dashed: above the line is borrowed
  const ys = points.map((p) => (p.used[queue] || {})[key] || 0);
  if (ys.length < 2) return "";
  const max = Math.max(...ys, nominal, 1);
  const y = (v) => 24 - (v / max) * 22;
  const pts = ys.map((v, i) => `${(i / (ys.length - 1)) * 120},${y(v)}`).join(" ");
  const over = ys.filter((v) => v > nominal).length;
  const label = `use over the last ${ys.length} points, up to ${fmt(Math.max(...ys))}; nominal ${fmt(nominal)}` +
    (over ? `; above nominal (borrowing) at ${over} of them` : "");
  return h("span", {}, svg("svg", { class: "spark", width: 120, height: 26, role: "img", "aria-label": label },
    svg("title", {}, label),
    svg("line", { x1: 0, x2: 120, y1: y(nominal), y2: y(nominal), stroke: "#767676", "stroke-dasharray": "3 2" }),
    svg("polyline", { points: pts, fill: "none", stroke: "currentColor", "stroke-width": 1.5 })));
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  el.append(...children);
  return el;
}

// a cohort tree (nested cohorts): each cohort under its parent, with what it holds and lends
function cohortTree(cohorts) {
  const kids = (parent) => cohorts.filter((c) => c.parent === parent);
  const item = (c) => h("li", { "data-cohort": c.name },
    h("strong", {}, `cohort ${c.name}`),
    `: ${c.quota.map((r) => `${r.key} holds ${fmt(r.holds)} ${r.unit}${r.nominal ? ` (${fmt(r.nominal)} its own)` : ""}, members use ${fmt(r.used)}, borrowed ${fmt(r.borrowed)}, lends ${fmt(r.lends)}`).join("; ") || "holds nothing"}`,
    c.queues.length ? ` · queues ${c.queues.join(", ")}` : "",
    kids(c.name).length ? h("ul", {}, kids(c.name).map(item)) : null);
  return h("section", { id: "cohort-tree" }, h("h2", {}, "Cohort tree"),
    h("ul", {}, kids(null).map(item)),
    h("p", { class: "muted" }, "Holds: its own nominal quota plus what its members lend it. Members use: what they draw of it past their guaranteed part. Borrowed: drawn from its parent beyond what it holds. Lends: what it holds unused that its parent may give to others, within its lending limit."));
}

async function queuesPage(main) {
  const q = await api("/api/queues");
  if (q.cohorts && q.cohorts.length) main.append(cohortTree(q.cohorts));
  for (const queue of q.queues) {
    main.append(h("h2", {}, `Queue ${queue.name}`),
      h("p", { class: "muted" }, `cohort ${queue.cohort ?? "none"} · weight ${queue.weight} · fair-share standing ${fmt(queue.fairShare, 3)} (borrowed share${queue.recentBorrowedShare === null ? "" : ` plus ${fmt(queue.recentBorrowedShare, 3)} borrowed recently`} over weight, lower goes first) · ${queue.pending} pending · namespaces ${queue.namespaces.join(", ")}`));
    const rows = queue.quota.map((r) => [r.key, r.unit, fmt(r.nominal), fmt(r.used), fmt(r.borrowed), fmt(r.lent),
      r.borrowingLimit === null ? "none" : fmt(r.borrowingLimit), r.lendingLimit === null ? "none" : fmt(r.lendingLimit), spark(q.history, queue.name, r.key, r.nominal)]);
    main.append(table(["Quota", "Unit", "Nominal", "Used", "Borrowed", "Lent", "Borrowing limit", "Lending limit", "Used over time"], rows, [2, 3, 4, 5, 6, 7]));
    if (q.gpuMetrics) {
      const u = (q.use || {})[queue.name];
      main.append(h("p", { class: "team-use", "data-team": queue.name },
        u ? `What its GPUs do (DCGM): ${fmt(u.gpus)} GPUs measured, ${useText(u)}` : "What its GPUs do (DCGM): none of the GPUs it holds is measured"));
    }
  }
  if (q.gpuMetrics) main.append(metricsNote(q));
  main.append(h("p", { class: "muted" }, "Borrowed: used beyond nominal. Lent: its share of what its cohort borrows, by the unused nominal each lender could lend (a cohort's lent adds up to its borrowed). Over time: a point a minute; the dashed line is the nominal quota, above it the queue borrows."));
}

// ---------------------------------------------------------------- pending
async function pendingPage(main, team = "") {
  const p = await api(`/api/pending${team ? `?team=${encodeURIComponent(team)}` : ""}`);
  const c = await api("/api/whoami");
  const select = h("select", { id: "team", onchange: (e) => redraw(`pending/${e.target.value}`) },
    h("option", { value: "" }, "all teams"), ...teams.map((t) => h("option", { value: t, selected: t === team }, t)));
  main.append(h("h2", {}, `Pending workloads (${p.total})`),
    h("p", {}, h("label", { for: "team" }, "Team "), select,
      c.namespaces ? h("span", { class: "muted" }, ` · showing namespaces ${c.namespaces.join(", ") || "none"} (${c.name})`) : ""));
  const rows = p.workloads.map((w) => [
    w.workload, w.queue, hours(w.waitingSeconds), `${w.stage} / ${w.plugin}`,
    h("details", { "data-workload": w.workload, ontoggle: explainOnce }, h("summary", {}, w.reason), h("pre", {}, "…")),
  ]);
  main.append(table(["Workload", "Queue", "Waiting", "Stage / plugin", "Why (open for the whole chain, as gpucarve explain prints it)"], rows));
}

async function explainOnce(e) {
  const details = e.target;
  if (!details.open || details.dataset.explained) return;
  details.dataset.explained = "true";
  const pre = details.querySelector("pre");
  try {
    const x = await api(`/api/explain?workload=${encodeURIComponent(details.dataset.workload)}`);
    pre.textContent = x.explain.join("\n");
  } catch (err) {
    pre.textContent = err.message;
  }
}

// ---------------------------------------------------------------- idle
async function idlePage(main) {
  const d = await api("/api/idle");
  main.append(h("h2", {}, "GPUs free now, by why no waiting work took them"));
  const now = [];
  for (const [pool, causes] of Object.entries(d.now)) for (const [cause, g] of Object.entries(causes)) now.push([pool, cause, fmt(g)]);
  main.append(now.length ? table(["Pool", "Cause", "GPUs"], now, [2]) : h("p", {}, "No free GPUs."));
  main.append(h("h2", {}, "GPU-hours free since the first cycle shown, by cause"));
  const past = [];
  for (const [pool, causes] of Object.entries(d.gpuHours)) for (const [cause, g] of Object.entries(causes)) past.push([pool, cause, fmt(g, 3)]);
  main.append(past.length ? table(["Pool", "Cause", "GPU-hours"], past, [2]) : h("p", {}, "Nothing yet."));
  main.append(h("p", { class: "muted" }, "nothing-waiting: no waiting work could use it. Other causes name the limit that kept the first waiting work that could off it (docs/engine.md, Why GPUs sit idle)."));
  main.append(h("h2", {}, "GPUs held but idle (the queues' idleness rules)"));
  main.append(d.heldIdle.length
    ? table(["Workload", "Queue", "Stage", "Idle for", "Reclaimable in", "What follows"],
      d.heldIdle.map((w) => [w.workload, w.queue, w.stage, hours(w.idleSeconds), w.reclaimInSeconds === null ? "-" : hours(w.reclaimInSeconds), w.message]))
    : h("p", {}, "No running work is judged idle."));
}

// ---------------------------------------------------------------- changes
async function changesPage(main) {
  const d = await api("/api/changes");
  main.append(h("h2", {}, "GPUs out of service"),
    d.outOfService.length ? table(["GPU", "Why"], d.outOfService.map((g) => [g.gpu, g.why])) : h("p", {}, "None."));
  if (d.pastBudget.length) {
    main.append(h("h2", {}, "Faulty GPUs left in service (their pool's gpuHealth.maxOutOfService is spent)"),
      table(["GPU", "Why"], d.pastBudget.map((g) => [g.gpu, g.why])));
  }
  main.append(h("h2", {}, "MIG changes in flight"), h("p", {}, d.reconfiguring.join(", ") || "None."));
  main.append(h("h2", {}, "Recent evictions and repartitions"),
    d.events.length ? table(["When", "Kind", "What", "By", "GPU-hours lost", "Why"],
      d.events.map((e) => [when(e.at), e.kind, e.workload || `${e.gpu} → ${(e.layout || []).join(" + ")}`, e.by || "", e.gpuHoursLost ?? "", e.message]), [4])
      : h("p", {}, "None since the scheduler started."));
}

// ---------------------------------------------------------------- shadow
async function shadowPage(main) {
  const d = await api("/api/shadow");
  main.append(h("h2", {}, "What gpucarve would have done beside the real scheduler"));
  main.append(d.queues.length
    ? table(["Queue", "Slices it would run now that wait", "Slice-hours such work waited", "Started later than it would have", "Mean lead", "Largest lead"],
      d.queues.map((q) => [q.queue, q.aheadSlices, fmt(q.waitedSliceHours, 3), q.startedLater,
        q.meanLeadSeconds === null ? "-" : hours(q.meanLeadSeconds), q.maxLeadSeconds === null ? "-" : hours(q.maxLeadSeconds)]), [1, 2, 3, 4, 5])
    : h("p", {}, "No difference yet: the real scheduler started everything the shadow would have."));
  main.append(h("p", {}, `Pods it would have evicted since it started: ${d.wouldHaveEvicted}.`));
  main.append(h("p", { class: "muted" }, "The shadow binds nothing: it decides each cycle on the cluster as it is, so its starts are bounded by the capacity the real scheduler left (docs/kubernetes.md, Shadow mode)."));
}

// ---------------------------------------------------------------- what the user holds
// A new cycle redraws the page; what the user opened, typed or where they were stays as it was.
function keep(main) {
  const open = new Map();
  for (const d of main.querySelectorAll("details[open][data-workload]")) open.set(d.dataset.workload, d.querySelector("pre").textContent);
  const values = new Map([...main.querySelectorAll("input[id]")].map((i) => [i.id, i.value]));
  const active = document.activeElement;
  return { open, values, focus: active && active.id && main.contains(active) ? active.id : null, scroll: window.scrollY };
}

function restore(main, kept) {
  for (const d of main.querySelectorAll("details[data-workload]")) {
    if (!kept.open.has(d.dataset.workload)) continue;
    d.querySelector("pre").textContent = kept.open.get(d.dataset.workload);  // until this cycle's chain comes
    d.open = true;  // its toggle asks for the chain as it is now
  }
  for (const [id, value] of kept.values) {
    const input = main.querySelector(`#${CSS.escape(id)}`);
    if (input && value) input.value = value;
  }
  if (kept.focus) main.querySelector(`#${CSS.escape(kept.focus)}`)?.focus({ preventScroll: true });
  window.scrollTo(0, kept.scroll);
}

// ---------------------------------------------------------------- frame
let drawnRoute = null;
const PAGES = { cluster: clusterPage, queues: queuesPage, pending: pendingPage, idle: idlePage, changes: changesPage, shadow: shadowPage };

async function redraw(route) {
  if (route !== undefined && location.hash !== `#${route}`) {
    location.hash = route;  // hashchange draws it
    return;
  }
  const [page, ...args] = decodeURIComponent(location.hash.slice(1) || "cluster").split("/");
  const fresh = h("main", { id: "main", tabindex: "-1" });
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === (page === "pool" || page === "node" ? "cluster" : page)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    if (!teams.length && page !== "cluster") teams = (await api("/api/cluster").catch(() => ({ teams: [] }))).teams || [];
    if (page === "pool") await poolPage(fresh, args[0], Number(args[1] || 0));
    else if (page === "node") await nodePage(fresh, args[0]);
    else await (PAGES[page] || clusterPage)(fresh, ...args);
    document.getElementById("signin").hidden = true;
  } catch (err) {
    if (err instanceof Unauthorized) {
      document.getElementById("signin").hidden = false;
      document.getElementById("signin-why").textContent = err.message;
    }
    fresh.append(h("p", { class: "error", role: "alert" }, err.message));
  }
  // read just before the swap: what the user did while this cycle's answers came counts too
  const current = document.getElementById("main");
  const kept = drawnRoute === location.hash ? keep(current) : null;  // the same page, a new cycle
  current.replaceWith(fresh);
  if (kept) restore(fresh, kept);
  drawnRoute = location.hash;
  fresh.dataset.ready = "true";
  fresh.dataset.readyAt = String(performance.now());  // for bench/dashboard.py
}

async function poll() {
  try {
    const v = await api("/api/version");
    document.getElementById("shadow-link").hidden = !v.shadow;
    document.getElementById("status").textContent = `last cycle ${when(v.at)} · generation ${v.generation}`;
    if (v.generation !== shown) {
      shown = v.generation;
      await redraw();
    }
  } catch (err) {
    document.getElementById("status").textContent = err.message;
    if (shown === -1) { shown = -2; await redraw(); }
  }
}

document.getElementById("signin").addEventListener("submit", (e) => {
  e.preventDefault();
  token = document.getElementById("token").value.trim();
  sessionStorage.setItem("gpucarve-token", token);
  shown = -1;
  poll();
});
window.addEventListener("hashchange", () => redraw());
poll();
setInterval(poll, POLL_MS);
