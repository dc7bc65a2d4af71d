// The metrics charts (#/metrics): each broker's /metrics, scraped by the console at a fixed interval and
// kept there 15 minutes, drawn with uPlot (vendored): produce and fetch rates, request time percentiles,
// the remote tier's copy and read rates, errors. Every point is the change between two scrapes.
import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import uPlot from "uplot";

const html = htm.bind(h);
const COLORS = ["#3b6fd1", "#e8a33d", "#4caf7d", "#d9534f", "#8e5bc8"];
// The cumulative figures of the last scrape shown under the charts (what the tests compare with /metrics).
const TOTALS = [["produce_bytes", "bytes in"], ["fetch_bytes", "bytes out"], ["produce_requests", "produce requests"],
  ["fetch_requests", "consumer fetches"], ["remote_copy_bytes", "remote bytes copied"],
  ["remote_fetch_bytes", "remote bytes read"], ["errors", "request errors"]];

function number(v, unit) {
  if (v === null || v === undefined) return "-";
  if (unit === "ms") return `${v.toFixed(v < 10 ? 2 : 0)} ms`;
  if (unit === "bytes/s") {
    const units = ["B/s", "KiB/s", "MiB/s", "GiB/s"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
  }
  return `${v.toFixed(v < 10 ? 2 : 0)} ${unit}`;
}

function lastOf(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
  return null;
}

function Chart({ chart, broker }) {
  const el = useRef(null);
  const plot = useRef(null);
  const data = [broker.t, ...chart.series.map((s) => broker.series[s.key])];
  useEffect(() => {
    const opts = { width: 560, height: 200, title: chart.title, legend: { show: false },
      series: [{}, ...chart.series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5,
        spanGaps: false }))],
      axes: [{}, { size: 86, values: (u, ticks) => ticks.map((v) => number(v, chart.unit)) }] };
    plot.current = new uPlot(opts, data, el.current);
    return () => { plot.current.destroy(); plot.current = null; };
  }, [chart.id]);
  useEffect(() => { if (plot.current) plot.current.setData(data); });
  return html`<div class="chart" id=${`chart-${chart.id}`} data-points=${broker.t.length}>
    <div ref=${el}></div>
    <div class="legend">${chart.series.map((s, i) => {
      const v = lastOf(broker.series[s.key]);
      return html`<span data-k=${s.key} data-v=${v === null ? "" : v}><i style=${`background:${COLORS[i % COLORS.length]}`}></i>
        ${s.label}: ${number(v, chart.unit)}</span>`;
    })}</div></div>`;
}

export function MetricsPage() {
  const [state, setState] = useState({ data: null, error: null });
  const [chosen, setChosen] = useState(null);
  useEffect(() => {
    let live = true;
    let timer = null;
    const tick = async () => {
      let every = 2000;
      try {
        const response = await fetch("/api/metrics");
        const body = await response.json();
        if (!response.ok) throw new Error(body.error || `${response.status}`);
        every = Math.max(500, body.interval_s * 1000);
        if (live) setState({ data: body, error: null });
      } catch (e) {
        if (live) setState((s) => ({ data: s.data, error: e.message }));
      }
      if (live) timer = setTimeout(tick, every);
    };
    tick();
    return () => { live = false; clearTimeout(timer); };
  }, []);
  const d = state.data;
  const ids = d ? Object.keys(d.brokers) : [];
  const id = chosen !== null && ids.includes(chosen) ? chosen : ids[0];
  const broker = d && id !== undefined ? d.brokers[id] : null;
  return html`<h1>Metrics</h1>
    ${state.error && html`<div class="error" role="alert">${state.error}</div>`}
    ${d && d.error && html`<div class="error" role="alert">${d.error}</div>`}
    ${!d && !state.error && html`<p class="muted">Loading…</p>`}
    ${d && html`<p class="muted">${`every broker's /metrics, scraped every ${d.interval_s} s, the last ${
        Math.round(d.history_s / 60)} minutes kept by the console (from when a page first asked); each point is the
        change since the scrape before`}</p>
      ${ids.length > 0 && html`<form class="inline"><label>broker<select id="broker" value=${id}
        onChange=${(e) => setChosen(e.target.value)}>${ids.map((b) => html`<option value=${b}>${b}</option>`)}</select></label></form>`}
      ${Object.entries(d.brokers).filter(([, b]) => b.error).map(([b, x]) => html`<div class="error" role="alert">broker ${b}: ${x.error}</div>`)}
      ${broker && html`<div class="charts" data-broker=${id}>${broker.t.length < 1
        ? html`<p class="muted">collecting: the charts start from the second scrape</p>`
        : d.charts.map((c) => html`<${Chart} key=${`${id}-${c.id}`} chart=${c} broker=${broker} />`)}</div>`}
      <h2>Totals at the last scrape</h2>
      <table id="totals"><thead><tr><th>broker</th><th>scraped</th>${TOTALS.map(([, label]) => html`<th class="num">${label}</th>`)}</tr></thead>
      <tbody>${ids.map((b) => { const x = d.brokers[b]; return html`<tr data-broker=${b}><td>${b}</td>
        <td data-k="latest_t" data-v=${x.latest_t ?? ""}>${x.latest_t ? new Date(x.latest_t * 1000).toLocaleTimeString() : "-"}</td>
        ${TOTALS.map(([k]) => html`<td class="num" data-k=${k} data-v=${x.latest ? x.latest[k] : ""}>${x.latest ? x.latest[k] : "-"}</td>`)}
        </tr>`; })}</tbody></table>`}`;
}
