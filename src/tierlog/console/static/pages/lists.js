// The long lists (topics, groups): a page of rows at a time from the console's shared picture of the
// cluster, with a filter box, sortable columns and paging (docs/console.md "Long lists"). The console
// answers only the rows on screen, so 10,000 partitions or 1,000 groups cost the browser one page.
import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";
import { Cell, api, bytes } from "../app.js";

const html = htm.bind(h);
const POLL_MS = Number(new URLSearchParams(location.search).get("poll")) || 2000;
//: Rows per page.
export const PAGE_ROWS = 50;

// One page of `path`'s rows, asked again POLL_MS after the last answer: the console answers from its
// picture of the cluster (made in the background, shared by every tab), so a poll costs the brokers nothing.
function usePage(path, query) {
  const [state, setState] = useState({ data: null, error: null });
  const key = `${path}?${new URLSearchParams(query)}`;
  useEffect(() => {
    let live = true;
    let timer = null;
    const tick = async () => {
      try {
        const data = await api(key);
        if (live) setState({ data, error: null });
      } catch (e) {
        if (live) setState((s) => ({ data: s.data, error: e.message }));
      }
      if (live) timer = setTimeout(tick, POLL_MS);
    };
    tick();
    return () => { live = false; clearTimeout(timer); };
  }, [key]);
  return state;
}

// A list's state: filter, sort column and direction, first row; a new filter or sort starts at row 0.
function useListQuery(initialSort) {
  const [q, setQ] = useState({ filter: "", sort: initialSort, desc: false, offset: 0 });
  const query = { offset: q.offset, limit: PAGE_ROWS, sort: q.sort, desc: q.desc };
  if (q.filter) query.filter = q.filter;
  return {
    q, query,
    filter: (text) => setQ({ ...q, filter: text, offset: 0 }),
    sortBy: (column) => setQ({ ...q, sort: column, desc: q.sort === column ? !q.desc : false, offset: 0 }),
    page: (offset) => setQ({ ...q, offset: Math.max(0, offset) }),
  };
}

function Header({ list, column, label, num = true }) {
  const mark = list.q.sort === column ? (list.q.desc ? " ▼" : " ▲") : "";
  return html`<th class=${`sortable${num ? " num" : ""}`} data-sort=${column} onClick=${() => list.sortBy(column)}
    aria-sort=${list.q.sort === column ? (list.q.desc ? "descending" : "ascending") : "none"}>${label}${mark}</th>`;
}

function Controls({ list, data, what }) {
  const first = data.matched ? data.offset + 1 : 0;
  const last = data.offset + data[what].length;
  return html`<div class="list-controls">
    <label>filter <input id="list-filter" type="search" placeholder=${`part of a ${what.slice(0, -1)} name`}
      value=${list.q.filter} onInput=${(e) => list.filter(e.target.value)} /></label>
    <button id="page-prev" disabled=${data.offset === 0} onClick=${() => list.page(data.offset - PAGE_ROWS)}>‹ previous</button>
    <span id="list-count" data-total=${data.total} data-matched=${data.matched}>${first}–${last} of ${data.matched}
      ${data.matched !== data.total ? ` matching (${data.total} ${what})` : ` ${what}`}</span>
    <button id="page-next" disabled=${last >= data.matched} onClick=${() => list.page(data.offset + PAGE_ROWS)}>next ›</button>
  </div>`;
}

function Problems({ state }) {
  const d = state.data;
  return html`
    ${state.error && html`<div class="error" role="alert">${state.error}${d
      ? html` <span class="muted">(showing what was known at ${new Date(d.at_ms).toLocaleTimeString()})</span>` : ""}</div>`}
    ${!d && !state.error && html`<p class="muted">Loading…</p>`}
    ${d && d.brokers_unanswered.length > 0 && html`<div class="error" role="alert">broker(s)
      ${d.brokers_unanswered.join(", ")} did not answer for their tiers: their figures show "-"</div>`}`;
}

function Updated({ data }) {
  return html`<p class="updated">the cluster as read at ${new Date(data.at_ms).toLocaleTimeString()} (in ${
    data.took_ms} ms; read again every few seconds while a page is open)</p>`;
}

export function TopicList() {
  const list = useListQuery("topic");
  const state = usePage("/api/topics", list.query);
  const d = state.data;
  return html`<${Problems} state=${state} />
    ${d && html`<${Controls} list=${list} data=${d} what="topics" />
      <table id="topics"><thead><tr><${Header} list=${list} column="topic" label="topic" num=${false} />
        <${Header} list=${list} column="partitions" label="partitions" />
        <${Header} list=${list} column="replication_factor" label="replication" />
        <${Header} list=${list} column="offline" label="offline" />
        <${Header} list=${list} column="under_replicated" label="under-replicated" />
        <${Header} list=${list} column="tiering" label="tiering" num=${false} />
        <${Header} list=${list} column="local_bytes" label="local size" />
        <${Header} list=${list} column="remote_bytes" label="remote size" />
        <${Header} list=${list} column="copy_lag_bytes" label="copy lag" /></tr></thead>
      <tbody>${d.topics.map((t) => html`<tr key=${t.topic} data-topic=${t.topic}>
        <td><a href=${`#/topics/${encodeURIComponent(t.topic)}`}>${t.topic}</a></td>
        <${Cell} k="partitions" v=${t.partitions} /><${Cell} k="replication_factor" v=${t.replication_factor} />
        <${Cell} k="offline" v=${t.offline} /><${Cell} k="under_replicated" v=${t.under_replicated} />
        <td data-k="tiering">${t.tiering || "off"}</td>
        <${Cell} k="local_bytes" v=${t.local_bytes} text=${bytes(t.local_bytes)} />
        <${Cell} k="remote_bytes" v=${t.remote_bytes} text=${bytes(t.remote_bytes)} />
        <${Cell} k="copy_lag_bytes" v=${t.copy_lag_bytes} text=${bytes(t.copy_lag_bytes)} />
      </tr>`)}</tbody></table>
      <${Updated} data=${d} />`}`;
}

export function GroupList() {
  const list = useListQuery("group");
  const state = usePage("/api/groups", list.query);
  const d = state.data;
  return html`<${Problems} state=${state} />
    ${d && html`<${Controls} list=${list} data=${d} what="groups" />
      <table id="groups"><thead><tr><${Header} list=${list} column="group" label="group" num=${false} />
        <${Header} list=${list} column="type" label="type" num=${false} />
        <${Header} list=${list} column="group_type" label="protocol" num=${false} />
        <${Header} list=${list} column="state" label="state" num=${false} /></tr></thead>
      <tbody>${d.groups.map((g) => html`<tr key=${g.group} data-group=${g.group}>
        <td><a href=${`#/groups/${encodeURIComponent(g.group)}`}>${g.group}</a></td><td>${g.type}</td>
        <td data-k="group_type">${g.group_type || "-"}</td><td data-k="state">${g.state}</td></tr>`)}
      </tbody></table><${Updated} data=${d} />`}`;
}
