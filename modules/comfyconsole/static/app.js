// comfygate console: polls the console API (relative to this page) with the
// operator's credential, which stays in this tab's sessionStorage. The page
// never puts server data into HTML markup: text goes in with textContent.

const $ = (id) => document.getElementById(id);
const JOBS_EVERY = 1000;
const OVERVIEW_EVERY = 5000;

const state = {
  token: sessionStorage.getItem("comfygate-console-token") || "",
  cursors: [""], // cursors[i] opens page i; page 0 is the newest
  next: "",
  openJob: null, // {account, id}
  thumbs: new Map(), // content path -> object URL
  timers: [],
};

class Refused extends Error {}

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` } });
  if (res.status === 401 || res.status === 403) throw new Refused(`the credential was refused (${res.status})`);
  if (!res.ok) throw new Error(`${path}: ${res.status}`);
  return res;
}

const json = async (path) => (await api(path)).json();

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  for (const c of children) e.append(c);
  return e;
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return new Date(iso).toLocaleString();
}

function took(job) {
  if (!job.started_at) return "";
  const end = job.completed_at ? Date.parse(job.completed_at) : Date.now();
  return `${((end - Date.parse(job.started_at)) / 1000).toFixed(1)} s`;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// thumb returns an <img> for an image output, loaded with the credential.
function thumb(output, cls = "thumb") {
  const img = el("img", { className: cls, alt: output.name });
  const cached = state.thumbs.get(output.content);
  if (cached) {
    img.src = cached;
    return img;
  }
  api(output.content)
    .then((r) => r.blob())
    .then((b) => {
      const u = URL.createObjectURL(b);
      state.thumbs.set(output.content, u);
      img.src = u;
    })
    .catch(() => {});
  return img;
}

function badge(status) {
  return el("span", { className: `badge ${status}`, textContent: status });
}

function progressBar(job) {
  const value = job.status === "succeeded" ? 1 : (job.progress && job.progress.value) || 0;
  const bar = el("progress", { max: 1, value });
  bar.title = `${Math.round(value * 100)} %`;
  return bar;
}

function renderJobs(page) {
  const body = $("jobs").tBodies[0];
  const rows = page.jobs.map((job) => {
    const image = job.outputs.find((o) => o.type === "image");
    const row = el("tr", {},
      el("td", {}, badge(job.status)),
      el("td", {}, progressBar(job)),
      el("td", {}, image ? thumb(image) : ""),
      // Ids are UUIDv7: they begin with their creation time, alike for
      // jobs of the same minute, and end in random digits that tell them
      // apart. The whole id is on hover.
      el("td", {}, el("code", { textContent: `…${job.id.slice(-8)}`, title: job.id })),
      el("td", { textContent: job.account }),
      el("td", { textContent: job.pool }),
      el("td", { textContent: ago(job.created_at) }),
      el("td", { textContent: took(job) }));
    row.dataset.job = job.id;
    row.dataset.status = job.status;
    row.addEventListener("click", () => openDetail(job.account, job.id));
    return row;
  });
  body.replaceChildren(...rows);
  state.next = page.next_cursor || "";
  $("older").disabled = !state.next;
  $("newer").disabled = state.cursors.length === 1;
  $("page").textContent = `page ${state.cursors.length}`;
}

function card(title, value, ...lines) {
  return el("div", { className: "card" }, el("span", { className: "muted", textContent: title }),
    el("b", { textContent: value }), ...(lines.length ? [el("ul", {}, ...lines.map((l) => el("li", { textContent: l })))] : []));
}

function renderOverview(o) {
  $("pools").replaceChildren(...o.pools.map((p) => {
    const workers = p.kind === "builtin"
      ? ["built-in executor, always healthy"]
      : p.workers.map((w) => `${w.url}: ${w.draining ? `draining (${w.drain_reason || "removed"})` : w.healthy ? "healthy" : w.unhealthy_reason ? `unhealthy (${w.unhealthy_reason})` : "unhealthy"}, ${w.running}/${w.capacity} running`);
    return card(`${p.name} (${p.kind})`, `${p.queued} queued · ${p.running} running`, `capacity ${p.capacity} here`, ...workers);
  }));
  const u = o.last_hour.usage;
  const refused = Object.entries(u.upload_refusals).map(([code, n]) => `${n} refused: ${code}`);
  const calls = Object.entries(u.router_calls);
  const total = calls.reduce((s, [, n]) => s + n, 0);
  $("usage").replaceChildren(
    card("uploads", String(u.uploads), `${u.deduplicated} deduplicated`, bytes(u.upload_bytes), ...refused),
    card("router calls", String(total), ...calls.map(([b, n]) => `${n} ${b}`), `${u.router_settled_cents} cents settled`));
  $("since").textContent = `since ${new Date(o.last_hour.since).toLocaleTimeString()}, this gateway`;
}

async function openDetail(account, id) {
  state.openJob = { account, id };
  $("detail").hidden = false;
  await refreshDetail();
}

async function refreshDetail() {
  const open = state.openJob;
  if (!open) return;
  const d = await json(`api/jobs/${encodeURIComponent(open.account)}/${open.id}`);
  if (state.openJob !== open) return;
  const job = d.job;
  $("detail-title").replaceChildren(badge(job.status), ` job ${job.id}`);
  const facts = [["account", job.account], ["pool", job.pool], ["created", job.created_at],
    ["started", job.started_at || "—"], ["ended", job.completed_at || "—"], ["took", took(job) || "—"]];
  $("detail-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { textContent: k }), el("dd", { textContent: v })]));
  $("detail-error").textContent = job.error ? `${job.error.code}: ${job.error.message}${job.error.node_id ? ` (node ${job.error.node_id})` : ""}` : "";
  $("detail-outputs").replaceChildren(...job.outputs.map((o) =>
    o.type === "image" ? thumb(o, "") : el("div", { textContent: `${o.name} (${o.type}, ${bytes(o.size_bytes)})` })));
  $("detail-nodes").replaceChildren(...d.nodes.map((n) =>
    el("li", {}, el("b", { textContent: n.class_type }), ` #${n.id} `, el("code", { textContent: JSON.stringify(n.inputs) }))));
  $("detail-log-box").hidden = !d.log;
  $("detail-log").textContent = d.log ? d.log.text : "";
  return job;
}

function jobsPath() {
  const q = new URLSearchParams({ limit: "25" });
  const status = $("status").value;
  if (status) q.set("status", status);
  const cursor = state.cursors[state.cursors.length - 1];
  if (cursor) q.set("cursor", cursor);
  return `api/jobs?${q}`;
}

function every(ms, fn) {
  const tick = async () => {
    try {
      await fn();
      $("state").textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e instanceof Refused) return signOut(e.message);
      $("state").textContent = `no answer: ${e.message}`;
    }
    state.timers.push(setTimeout(tick, ms));
  };
  tick();
}

function start() {
  $("signin").hidden = true;
  $("main").hidden = false;
  $("signout").hidden = false;
  every(JOBS_EVERY, refreshJobs);
  every(OVERVIEW_EVERY, async () => renderOverview(await json("api/overview")));
  every(JOBS_EVERY, refreshDetail);
}

async function refreshJobs() {
  renderJobs(await json(jobsPath()));
}

// repage shows another page at once rather than at the next tick.
function repage(change) {
  change();
  refreshJobs().catch(() => {});
}

function signOut(message = "") {
  state.timers.forEach(clearTimeout);
  state.timers = [];
  state.token = "";
  sessionStorage.removeItem("comfygate-console-token");
  $("main").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("jobs").tBodies[0].replaceChildren();
  $("pools").replaceChildren();
  $("usage").replaceChildren();
}

$("signin").addEventListener("submit", (e) => {
  e.preventDefault();
  state.token = $("token").value;
  sessionStorage.setItem("comfygate-console-token", state.token);
  $("token").value = "";
  start();
});
$("signout").addEventListener("click", () => signOut());
$("close").addEventListener("click", () => { state.openJob = null; $("detail").hidden = true; });
$("status").addEventListener("change", () => repage(() => { state.cursors = [""]; }));
$("older").addEventListener("click", () => repage(() => { if (state.next) state.cursors.push(state.next); }));
$("newer").addEventListener("click", () => repage(() => { if (state.cursors.length > 1) state.cursors.pop(); }));

if (state.token) start();
else signOut();
