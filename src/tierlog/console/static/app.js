// tierlog console: one page, hash routes, every figure polled from the console's /api (docs/console.md).
// Preact renders, htm gives JSX-like templates without a build step; both are vendored ES modules.
import { h, render } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";
import { GroupList, TopicList } from "./pages/lists.js";
import { RecordsPage } from "./browse.js";
import { MetricsPage } from "./metrics.js";
import { ResetOffsets, TieringPanel, TopicConfigs } from "./pages/consoleact.js";

const html = htm.bind(h);
// How often a page asks again (ms); ?poll=N in the address changes it.
const POLL_MS = Number(new URLSearchParams(location.search).get("poll")) || 2000;
export const TOKEN_KEY = "tierlog.console.token";

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export async function api(path, options = {}) {
  let response;
  try {
    response = await fetch(path, options);
  } catch (e) {
    throw new ApiError(0, `the console does not answer (${e.message}); is tierlog console still running?`);
  }
  let body = null;
  try { body = await response.json(); } catch { /* not JSON: the status says it */ }
  if (!response.ok) {
    throw new ApiError(response.status, (body && body.error) || `${response.status} ${response.statusText}`);
  }
  return body;
}

// The answer of `path`, asked again POLL_MS after the last one came, or five times as long as that one
// took when longer (a big cluster's answers are slow to make: the console then asks the brokers less
// often), at most 10 * POLL_MS (one slow answer while a broker dies must not hide the next changes for
// long); the last good answer stays while an error shows.
export function usePoll(path) {
  const [state, setState] = useState({ data: null, error: null, at: null, every: POLL_MS });
  useEffect(() => {
    let live = true;
    let timer = null;
    setState({ data: null, error: null, at: null, every: POLL_MS });
    const tick = async () => {
      const started = performance.now();
      let every = POLL_MS;
      try {
        const data = await api(path);
        every = Math.min(10 * POLL_MS, Math.max(POLL_MS, 5 * (performance.now() - started)));
        if (live) setState({ data, error: null, at: new Date(), every });
      } catch (e) {
        if (live) setState((s) => ({ data: s.data, error: e.message, at: s.at, every }));
      }
      if (live) timer = setTimeout(tick, every);
    };
    tick();
    return () => { live = false; clearTimeout(timer); };
  }, [path]);
  return state;
}

// ------------------------------------------------------------------------------------------------ format

const UNITS = ["KiB", "MiB", "GiB", "TiB", "PiB"];
// As `tierlog tier status` prints sizes: binary units, one decimal.
export function bytes(n) {
  if (n === null || n === undefined) return "-";
  if (Math.abs(n) < 1024) return `${n} B`;
  let v = n;
  for (const unit of UNITS) {
    v /= 1024;
    if (Math.abs(v) < 1024 || unit === "PiB") return `${v.toFixed(1)} ${unit}`;
  }
}
export const show = (v) => (v === null || v === undefined ? "-" : String(v));
const duration = (ms) => (ms < 1000 ? `${Math.max(0, ms)} ms` : `${Math.round(ms / 1000)} s`);

// A figure cell: the raw value in data-v (what the tests compare), the readable one shown.
export function Cell({ k, v, text, cls = "num" }) {
  return html`<td class=${cls} data-k=${k} data-v=${v === null || v === undefined ? "" : v}>${text ?? show(v)}</td>`;
}

function Status({ state }) {
  return html`
    ${state.error && html`<div class="error" role="alert">${state.error}${state.data
      ? html` <span class="muted">(showing what was known at ${state.at.toLocaleTimeString()})</span>` : ""}</div>`}
    ${!state.data && !state.error && html`<p class="muted">Loading…</p>`}`;
}

function Updated({ state }) {
  const next = (state.every / 1000).toFixed(1);
  return state.at && html`<p class="updated">updated ${state.at.toLocaleTimeString()}, next in ${next} s</p>`;
}

// -------------------------------------------------------------------------------------------------- pages

function ClusterPage() {
  const state = usePoll("/api/cluster");
  const c = state.data;
  return html`<h1>Cluster</h1><${Status} state=${state} />
    ${c && html`
      <div class="cards">
        <div class="card">cluster id <b data-k="cluster_id">${c.cluster_id}</b></div>
        <div class="card">controller <b data-k="controller_id">${c.controller_id >= 0 ? c.controller_id : "none"}</b></div>
        <div class="card">brokers alive <b data-k="alive">${c.brokers.filter((b) => b.alive).length} / ${c.brokers.length}</b></div>
        <div class="card">topics <b data-k="topics">${c.topics}</b></div>
        <div class="card">partitions <b data-k="partitions">${c.partitions}</b></div>
        <div class="card">offline <b data-k="offline" class=${c.offline_partitions.length ? "bad" : ""}>${c.offline_partitions.length}</b></div>
        <div class="card">under-replicated <b data-k="under_replicated" class=${c.under_replicated_partitions.length ? "bad" : ""}>${c.under_replicated_partitions.length}</b></div>
      </div>
      <table id="brokers"><thead><tr><th>broker</th><th>address</th><th>rack</th><th>state</th><th>controller</th>
        <th class="num">leaders</th><th class="num">partitions</th><th>HTTP endpoint</th><th>log dirs</th></tr></thead>
      <tbody>${c.brokers.map((b) => html`<tr data-broker=${b.id}>
        <${Cell} k="id" v=${b.id} />
        <td>${b.alive ? `${b.host}:${b.port}` : "-"}</td><td>${show(b.rack)}</td>
        <td data-k="state" class=${b.alive ? "ok" : "bad"}>${b.alive ? "alive" : "not alive"}</td>
        <td>${b.controller ? "yes" : ""}</td>
        <${Cell} k="leaders" v=${b.leaders} /><${Cell} k="partitions" v=${b.partitions} />
        <td>${b.endpoint_error ? html`<span class="bad">${b.endpoint_error}</span>` : show(b.endpoint)}</td>
        <td>${b.log_dirs.map((d) => html`<div>${d.path || d.log_dir || ""} ${d.online === false || d.error
          ? html`<span class="bad">offline${d.error ? `: ${d.error}` : ""}</span>` : html`<span class="ok">online</span>`}</div>`)}</td>
      </tr>`)}</tbody></table>
      ${c.offline_partitions.length + c.under_replicated_partitions.length > 0 && html`
        <h2>Partitions that need attention</h2>
        <table><thead><tr><th>topic</th><th class="num">partition</th><th>leader</th><th>replicas</th><th>ISR</th><th>problem</th></tr></thead>
        <tbody>${[...c.offline_partitions.map((p) => [p, "offline"]), ...c.under_replicated_partitions.map((p) => [p, "under-replicated"])]
          .map(([p, what]) => html`<tr><td>${p.topic}</td><td class="num">${p.partition}</td><td>${show(p.leader)}</td>
            <td>${p.replicas.join(",")}</td><td>${p.isr.join(",")}</td><td class="bad">${what}</td></tr>`)}</tbody></table>`}
      <${Updated} state=${state} />`}`;
}

function TopicsPage({ token }) {
  // the list itself is a page of rows of the console's shared picture (pages/lists.js)
  return html`<h1>Topics</h1><${CreateTopic} token=${token} /><${TopicList} />`;
}

function authHeaders(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// An action: asked to confirm first, then its outcome (or the refusal) shown.
export function useAction() {
  const [pending, setPending] = useState(null);
  const [outcome, setOutcome] = useState(null);
  const run = async (token) => {
    const { path, done } = pending;
    setPending(null);
    try {
      const body = await api(path, { method: "POST", headers: authHeaders(token) });
      setOutcome({ ok: true, text: done(body) });
    } catch (e) {
      setOutcome({ ok: false, text: `refused: ${e.message}` });
    }
  };
  return { pending, outcome, ask: (p) => { setOutcome(null); setPending(p); }, cancel: () => setPending(null), run };
}

function Action({ action, token }) {
  return html`
    ${action.pending && html`<div class="confirm" id="confirm">${action.pending.question}
      <button id="confirm-yes" onClick=${() => action.run(token)}>Confirm</button>
      <button onClick=${action.cancel}>Cancel</button></div>`}
    ${action.outcome && html`<div id="outcome" class=${action.outcome.ok ? "outcome" : "error"}
      role="status">${action.outcome.text}</div>`}`;
}

function CreateTopic({ token }) {
  const action = useAction();
  const submit = (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const q = new URLSearchParams({ topic: f.get("topic") });
    for (const k of ["partitions", "replication_factor", "configs"]) if (f.get(k)) q.set(k, f.get(k));
    action.ask({
      path: `/api/topic/create?${q}`,
      question: `Create topic ${f.get("topic")} with ${f.get("partitions") || "the default"} partition(s), replication `
        + `${f.get("replication_factor") || "default"}${f.get("configs") ? `, settings ${f.get("configs")}` : ""}?`,
      done: (r) => `created topic ${r.topic} (${r.partitions} partition(s), replication ${r.replication_factor}, id ${r.topic_id})`,
    });
  };
  return html`<form class="inline" id="create-topic" onSubmit=${submit}>
      <label>new topic<input name="topic" required pattern="[a-zA-Z0-9._\\-]{1,249}" /></label>
      <label>partitions<input name="partitions" type="number" min="1" size="5" /></label>
      <label>replication<input name="replication_factor" type="number" min="1" size="5" /></label>
      <label>settings (k=v,k=v)<input name="configs" size="30" /></label>
      <button type="submit">Create…</button></form>
    <${Action} action=${action} token=${token} />`;
}

function TopicPage({ name, token }) {
  const state = usePoll(`/api/topic?topic=${encodeURIComponent(name)}`);
  const t = state.data;
  const action = useAction();
  const remove = () => action.ask({
    path: `/api/topic/delete?topic=${encodeURIComponent(name)}`,
    question: `Delete topic ${name} and all its records (local and remote)?`,
    done: (r) => `deleted topic ${r.topic}`,
  });
  return html`<h1>Topic ${name}</h1><${Status} state=${state} />
    <button id="delete-topic" onClick=${remove}>Delete topic…</button><${Action} action=${action} token=${token} />
    ${t && html`
      <p>id <code>${t.topic_id}</code>, replication ${t.replication_factor}${t.tiering
        ? html`, tiering <b data-k="tiering">${t.tiering.state}</b>` : ", not tiered"}</p>
      <table id="partitions"><thead><tr><th class="num">partition</th><th>leader</th><th>replicas</th><th>ISR</th>
        <th class="num">log start</th><th class="num">log end</th><th class="num">local size</th><th class="num">remote size</th>
        <th class="num">copy lag</th><th></th></tr></thead>
      <tbody>${t.partitions.map((p) => html`<tr data-partition=${p.partition}>
        <${Cell} k="partition" v=${p.partition} /><td>${show(p.leader)}</td><td>${p.replicas.join(",")}</td>
        <td class=${p.isr.length < p.replicas.length ? "bad" : ""}>${p.isr.join(",")}</td>
        <${Cell} k="log_start_offset" v=${p.log_start_offset} /><${Cell} k="log_end_offset" v=${p.log_end_offset} />
        <${Cell} k="local_bytes" v=${p.tier && p.tier.local_bytes} text=${bytes(p.tier && p.tier.local_bytes)} />
        <${Cell} k="remote_bytes" v=${p.tier && p.tier.remote_bytes} text=${bytes(p.tier && p.tier.remote_bytes)} />
        <${Cell} k="copy_lag_segments" v=${p.tier && p.tier.copy_lag_segments} />
        <td><a href=${`#/topics/${encodeURIComponent(name)}/${p.partition}`}>timeline</a>
          <a href=${`#/topics/${encodeURIComponent(name)}/${p.partition}/records`}>messages</a></td></tr>`)}</tbody></table>
      <h2>Settings (not defaults)</h2>
      <${TopicConfigs} topic=${name} configs=${t.configs} token=${token} />
      <${TieringPanel} topic=${name} tiering=${t.tiering} token=${token} />
      <${Updated} state=${state} />`}`;
}

// The picture of one partition's offsets, log start to log end: the remote tier, the local log, their
// overlap, what waits to be copied, and the high watermark and last stable offset.
function Timeline({ p, row }) {
  const W = 900;
  const start = row.log_start_offset;
  const end = Math.max(row.log_end_offset, start + 1);
  const x = (o) => 10 + ((Math.min(Math.max(o, start), end) - start) / (end - start)) * (W - 20);
  const remoteEnd = row.highest_offset_in_remote_storage;
  const hasRemote = remoteEnd !== null && remoteEnd >= start;
  const marks = [["log start", start], ["local start", row.local_log_start_offset],
    ["high watermark", p.high_watermark], ["last stable", p.last_stable_offset], ["log end", row.log_end_offset]]
    .filter(([, o]) => o !== null && o !== undefined);
  return html`<svg class="timeline" id="timeline" width=${W} height="150" role="img"
      aria-label=${`offsets ${start} to ${row.log_end_offset}`}>
    ${hasRemote && html`<rect x=${x(start)} y="20" width=${Math.max(1, x(remoteEnd + 1) - x(start))} height="26"
      fill="var(--remote)"><title>remote: offsets ${start} to ${remoteEnd}</title></rect>`}
    <rect x=${x(row.local_log_start_offset)} y="52" width=${Math.max(1, x(row.log_end_offset) - x(row.local_log_start_offset))}
      height="26" fill="var(--local)"><title>local: offsets ${row.local_log_start_offset} to ${row.log_end_offset - 1}</title></rect>
    ${hasRemote && remoteEnd >= row.local_log_start_offset && html`<rect x=${x(row.local_log_start_offset)} y="84"
      width=${Math.max(1, x(remoteEnd + 1) - x(row.local_log_start_offset))} height="12" fill="var(--overlap)">
      <title>in both tiers: ${row.local_log_start_offset} to ${remoteEnd}</title></rect>`}
    ${row.copy_lag_segments > 0 && html`<rect x=${x((hasRemote ? remoteEnd + 1 : row.local_log_start_offset))} y="84"
      width=${Math.max(1, x(p.last_stable_offset ?? row.log_end_offset) - x(hasRemote ? remoteEnd + 1 : row.local_log_start_offset))}
      height="12" fill="var(--lag)"><title>waiting to be copied: ${row.copy_lag_segments} segment(s)</title></rect>`}
    <text x="10" y="14">remote tier</text><text x="10" y="118">${marks.map(([n, o]) => `${n} ${o}`).join("  ·  ")}</text>
    ${marks.map(([n, o]) => html`<line x1=${x(o)} x2=${x(o)} y1="16" y2="100" stroke="#1d2330" stroke-dasharray="2,2"><title>${n}: ${o}</title></line>`)}
  </svg>
  <div class="legend"><span><i style="background:var(--remote)"></i>remote</span><span><i style="background:var(--local)"></i>local</span>
    <span><i style="background:var(--overlap)"></i>in both</span><span><i style="background:var(--lag)"></i>waiting to be copied</span></div>`;
}

function PartitionPage({ name, partition }) {
  const state = usePoll(`/api/partition?topic=${encodeURIComponent(name)}&partition=${partition}`);
  const p = state.data;
  const leader = p && (p.replicas.find((r) => r.role === "leader") || null);
  return html`<h1>Partition ${name}-${partition}</h1><${Status} state=${state} />
    <p><a id="browse-link" href=${`#/topics/${encodeURIComponent(name)}/${partition}/records`}>messages</a></p>
    ${p && html`
      ${p.brokers_unanswered.map((b) => html`<div class="error" role="alert">broker ${b.node_id}: ${b.error}</div>`)}
      ${p.tiering && html`<p id="tiering">tiering (KIP-950): <b data-k="tiering_state">${p.tiering.state}</b>
        ${p.tiering.remote_segments_to_delete > 0 && html`, ${p.tiering.remote_segments_to_delete} remote segment(s)
          (${bytes(p.tiering.remote_bytes_to_delete)}) of the topic still to delete`}
        ${p.tiering.last_error && html` <span class="bad">${p.tiering.last_error}</span>`}</p>`}
      ${!leader && html`<div class="error" role="alert">no tier status from this partition's leader: it is not tiered,
        has no leader, or its broker's HTTP endpoint did not answer</div>`}
      ${leader && html`<${Timeline} p=${p} row=${leader} />
        <div class="cards" id="figures">
          <div class="card">remote <b data-k="remote_segments" data-v=${leader.remote_segments}>${show(leader.remote_segments)} segments</b>
            <span data-k="remote_bytes" data-v=${leader.remote_bytes}>${bytes(leader.remote_bytes)}</span></div>
          <div class="card">local <b data-k="local_segments" data-v=${leader.local_segments}>${show(leader.local_segments)} segments</b>
            <span data-k="local_bytes" data-v=${leader.local_bytes}>${bytes(leader.local_bytes)}</span></div>
          <div class="card">copy lag <b data-k="copy_lag_segments" data-v=${leader.copy_lag_segments}>${show(leader.copy_lag_segments)} segments</b>
            <span>${bytes(leader.copy_lag_bytes)}</span></div>
          <div class="card">local retention deletes next <b data-k="pending_local_deletion_segments"
            data-v=${leader.pending_local_deletion_segments}>${show(leader.pending_local_deletion_segments)} segments</b>
            <span>${bytes(leader.pending_local_deletion_bytes)}${leader.next_retention_check_ms
              ? `, in ${duration(leader.next_retention_check_ms - leader.now_ms)}` : ""}</span></div>
          <div class="card">high watermark <b data-k="high_watermark" data-v=${p.high_watermark}>${show(p.high_watermark)}</b>
            last stable <span data-k="last_stable_offset" data-v=${p.last_stable_offset}>${show(p.last_stable_offset)}</span></div>
        </div>`}
      <h2>Replicas</h2>
      <table id="replicas"><thead><tr><th>broker</th><th>role</th><th>state</th><th class="num">log start</th>
        <th class="num">local start</th><th class="num">remote end</th><th class="num">log end</th><th class="num">local segments</th>
        <th>last error</th></tr></thead>
      <tbody>${p.replicas.map((r) => html`<tr data-broker=${r.broker}><td>${r.broker}</td><td>${r.role}</td><td>${r.state}</td>
        <${Cell} k="log_start_offset" v=${r.log_start_offset} /><${Cell} k="local_log_start_offset" v=${r.local_log_start_offset} />
        <${Cell} k="highest_offset_in_remote_storage" v=${r.highest_offset_in_remote_storage} />
        <${Cell} k="log_end_offset" v=${r.log_end_offset} /><${Cell} k="local_segments" v=${r.local_segments} />
        <td class="bad">${show(r.last_error === null ? "" : r.last_error)}</td></tr>`)}</tbody></table>
      <${Updated} state=${state} />`}`;
}

function GroupsPage() {
  return html`<h1>Consumer groups</h1><${GroupList} />`;
  const state = usePoll("/api/groups");
  return html`<h1>Consumer groups</h1><${Status} state=${state} />
    ${state.data && html`<table id="groups"><thead><tr><th>group</th><th>type</th><th>protocol</th><th>state</th></tr></thead>
      <tbody>${state.data.groups.map((g) => html`<tr data-group=${g.group}>
        <td><a href=${`#/groups/${encodeURIComponent(g.group)}`}>${g.group}</a></td><td>${g.type}</td>
        <td data-k="group_type">${g.group_type || "-"}</td><td data-k="state">${g.state}</td></tr>`)}
      </tbody></table><${Updated} state=${state} />`}`;
}

// The group's total lag while the page is open, one point per poll (the broker keeps no lag history).
function LagChart({ points }) {
  if (points.length < 2) return html`<p class="muted">lag over time: collecting…</p>`;
  const W = 400, H = 60, max = Math.max(1, ...points);
  const path = points.map((v, i) => `${(i / (points.length - 1)) * W},${H - (v / max) * (H - 4)}`).join(" ");
  return html`<svg width=${W} height=${H} id="lag-chart"><polyline points=${path} fill="none" stroke="var(--lag)" stroke-width="2" />
    <title>total lag, last ${points.length} polls, max ${max}</title></svg>`;
}

function GroupPage({ name }) {
  const state = usePoll(`/api/group?group=${encodeURIComponent(name)}`);
  const [history, setHistory] = useState([]);
  const g = state.data;
  useEffect(() => {
    if (g) setHistory((h) => [...h.slice(-119), g.partitions.reduce((s, p) => s + (p.lag || 0), 0)]);
  }, [state.at]);
  return html`<h1>Group ${name}</h1><${Status} state=${state} />
    ${g && html`<p>state <b data-k="state">${g.state}</b>, type <b data-k="group_type">${g.group_type}</b>${g.group_epoch !== null
        && html`, group epoch <span data-k="group_epoch">${g.group_epoch}</span>`}, protocol ${g.protocol_type || "-"},
        assignor <span data-k="assignor">${g.assignor || "-"}</span>, coordinator ${g.coordinator.id}</p>
      <${LagChart} points=${history} />
      <h2>Members</h2>
      <table id="members"><thead><tr><th>member</th><th>client</th><th>host</th><th>epoch</th><th>partitions</th></tr></thead>
      <tbody>${g.members.length === 0 && html`<tr><td colspan="5" class="muted">no members</td></tr>`}
        ${g.members.map((m) => html`<tr data-member=${m.consumer_id}><td>${m.consumer_id}</td><td>${m.client_id}</td><td>${m.host}</td>
        <td>${show(m.member_epoch)}</td><td data-k="partitions">${m.partitions.join(", ")}</td></tr>`)}</tbody></table>
      <h2>Offsets and lag</h2>
      <table id="lag"><thead><tr><th>topic</th><th class="num">partition</th><th class="num">committed</th>
        <th class="num">log end</th><th class="num">lag</th><th>member</th></tr></thead>
      <tbody>${g.partitions.map((p) => html`<tr data-tp=${`${p.topic}-${p.partition}`}><td>${p.topic}</td>
        <${Cell} k="partition" v=${p.partition} /><${Cell} k="current_offset" v=${p.current_offset} />
        <${Cell} k="log_end_offset" v=${p.log_end_offset} /><${Cell} k="lag" v=${p.lag} /><td>${show(p.consumer_id)}</td></tr>`)}
      </tbody></table><${ResetOffsets} group=${name} g=${g} /><${Updated} state=${state} />`}`;
}

// ------------------------------------------------------------------------------------------------- shell

function route(hash) {
  const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "topics" && parts.length === 4 && parts[3] === "records") return { page: "records", name: parts[1], partition: Number(parts[2]) };
  if (parts[0] === "metrics") return { page: "metrics" };
  if (parts[0] === "topics" && parts.length === 3) return { page: "partition", name: parts[1], partition: Number(parts[2]) };
  if (parts[0] === "topics" && parts.length === 2) return { page: "topic", name: parts[1] };
  if (parts[0] === "groups" && parts.length === 2) return { page: "group", name: parts[1] };
  if (["topics", "groups"].includes(parts[0])) return { page: parts[0] };
  return { page: "cluster" };
}

function App() {
  const [where, setWhere] = useState(route(location.hash));
  const [token, setToken] = useState(sessionStorage.getItem(TOKEN_KEY) || "");
  const [session, setSession] = useState(null);
  useEffect(() => {
    const moved = () => setWhere(route(location.hash));
    addEventListener("hashchange", moved);
    api("/api/session").then(setSession, () => setSession(null));
    return () => removeEventListener("hashchange", moved);
  }, []);
  const keep = (e) => { setToken(e.target.value); sessionStorage.setItem(TOKEN_KEY, e.target.value); };
  const tab = (page, label) => html`<a href=${`#/${page}`} class=${where.page.startsWith(page.slice(0, 5)) ? "active" : ""}>${label}</a>`;
  let page;
  if (where.page === "topics") page = html`<${TopicsPage} token=${token} />`;
  else if (where.page === "topic") page = html`<${TopicPage} key=${where.name} name=${where.name} token=${token} />`;
  else if (where.page === "partition") page = html`<${PartitionPage} key=${`${where.name}/${where.partition}`} name=${where.name} partition=${where.partition} />`;
  else if (where.page === "groups") page = html`<${GroupsPage} />`;
  else if (where.page === "group") page = html`<${GroupPage} key=${where.name} name=${where.name} />`;
  else if (where.page === "records") page = html`<${RecordsPage} key=${`${where.name}/${where.partition}`} name=${where.name} partition=${where.partition} />`;
  else if (where.page === "metrics") page = html`<${MetricsPage} />`;
  else page = html`<${ClusterPage} />`;
  return html`<header><span class="brand">tierlog</span>${tab("cluster", "Cluster")}${tab("topics", "Topics")}
      ${tab("groups", "Groups")}${tab("metrics", "Metrics")}<span class="spacer"></span>
      <span class="muted">${session ? session.bootstrap : ""}</span>
      ${session && (session.actions
        ? html`<form onSubmit=${(e) => e.preventDefault()}><label>admin token <input id="token" type="password"
            autocomplete="off" value=${token} onInput=${keep} /></label></form>`
        : html`<span title="start tierlog console with --token to allow actions">read-only</span>`)}</header>
    <main>${page}</main>`;
}

const root = document.getElementById("app");
root.textContent = "";  // the "Loading" line of index.html
render(html`<${App} />`, root);
