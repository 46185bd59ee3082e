// The Tessera dashboard: polls the node's JSON API with the admin token and draws what it
// says. Everything the API returns is inserted as text (textContent), never as markup.
"use strict";

const TOKEN_KEY = "tessera.admin-token";
// How often the page asks the node again.
const POLL_MS = 3000;
// How many samples the rate charts keep: 100 polls of 3 s, the last five minutes.
const HISTORY_POINTS = 100;
// Shards drawn per row of the shard map.
const SHARDS_PER_ROW = 128;
const SVG = "http://www.w3.org/2000/svg";

const rates = [];
let previous = null;
let timer = null;

function $(id) { return document.getElementById(id); }

function token() { return sessionStorage.getItem(TOKEN_KEY); }

// A token handed over in the URL's fragment (`/ui#token=...`, never sent to the server) is
// taken once and removed from the address bar and the history.
function takeTokenFromFragment() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const given = fragment.get("token");
  if (given) {
    sessionStorage.setItem(TOKEN_KEY, given);
    rates.length = 0;
    window.history.replaceState(null, "", location.pathname + location.search);
  }
}

class Unauthorized extends Error {}

async function api(path, bearer) {
  const response = await fetch(path, {
    headers: { Authorization: "Bearer " + bearer, Accept: "application/json" },
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 401 || response.status === 403) {
    throw new Unauthorized("the node refused the token (" + response.status + ")");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw new Error(path + ": " + response.status + " " + message);
  }
  return body;
}

function showLogin(message) {
  clearTimeout(timer);
  document.body.dataset.view = "login";
  delete document.body.dataset.ready;
  $("dashboard").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("where").textContent = "";
  $("refreshed").textContent = "";
  $("login-error").textContent = message || "";
}

function showDashboard() {
  document.body.dataset.view = "dashboard";
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("logout").hidden = false;
}

async function poll() {
  const bearer = token();
  if (!bearer) { showLogin(); return; }
  try {
    const [overview, shards] = await Promise.all([
      api("/v1/overview", bearer),
      api("/v1/cluster/shards", bearer),
    ]);
    showDashboard();
    render(overview, shards.shards || []);
    $("problem").textContent = "";
  } catch (error) {
    if (error instanceof Unauthorized) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("Not the admin token: " + error.message);
      return;
    }
    $("problem").textContent = "Could not refresh: " + error.message;
  }
  timer = setTimeout(poll, POLL_MS);
}

function sum(nodes, field) { return nodes.reduce((total, node) => total + (node[field] || 0), 0); }

// One rate sample from two polls: per node present in both, its counter's growth (a node
// that restarted counts from zero), over the seconds between them.
function sampleRates(nodes) {
  const now = Date.now();
  const counters = {};
  for (const node of nodes) {
    counters[node.node] = { messages: node.messages, errors: node.message_errors, commits: node.commits };
  }
  if (previous) {
    const seconds = Math.max((now - previous.at) / 1000, 0.001);
    const rate = { messages: 0, errors: 0, commits: 0 };
    for (const [name, current] of Object.entries(counters)) {
      const before = previous.counters[name];
      if (!before) continue;
      for (const key of Object.keys(rate)) {
        const grown = current[key] - before[key];
        rate[key] += (grown >= 0 ? grown : current[key]) / seconds;
      }
    }
    rates.push(rate);
    if (rates.length > HISTORY_POINTS) rates.shift();
  }
  previous = { at: now, counters };
}

function sparkline(svg, values, extraClass) {
  svg.replaceChildren();
  if (values.length < 2) return;
  const max = Math.max(1, ...values);
  const step = 300 / (HISTORY_POINTS - 1);
  const start = 300 - step * (values.length - 1);
  const points = values.map((value, i) =>
    (start + i * step).toFixed(1) + "," + (58 - (value / max) * 54).toFixed(1));
  const area = document.createElementNS(SVG, "polygon");
  area.setAttribute("points", start.toFixed(1) + ",60 " + points.join(" ") + " 300,60");
  area.setAttribute("class", "spark-area");
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.join(" "));
  line.setAttribute("class", "spark " + (extraClass || ""));
  const title = document.createElementNS(SVG, "title");
  title.textContent = "max " + max.toFixed(1) + "/s";
  svg.append(area, line, title);
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "–" : String(text);
  if (className) td.className = className;
  row.append(td);
  return td;
}

function fill(tbody, rows, emptyText, columns) {
  tbody.replaceChildren();
  if (rows.length === 0) {
    const row = document.createElement("tr");
    const td = cell(row, emptyText);
    td.colSpan = columns;
    tbody.append(row);
  }
  for (const row of rows) tbody.append(row);
}

function render(overview, shards) {
  const cluster = overview.cluster;
  const nodes = overview.nodes;
  const members = cluster.members;
  const byNode = Object.fromEntries(nodes.map((node) => [node.node, node]));
  const nodeIndex = Object.fromEntries(members.map((member, i) => [member.node, i]));
  sampleRates(nodes);

  $("where").textContent = "node " + cluster.node + " · " + members.length + " member(s)";
  $("refreshed").textContent = "refreshed " + new Date().toLocaleTimeString();
  $("plane").textContent = "primary " + (cluster.primary || "none") + " · view " + cluster.view +
    " · commit " + cluster.commit + " · voters " + cluster.voters.join(", ");

  const live = overview.types.reduce((total, t) => total + t.live_entities, 0);
  const remembered = overview.types.reduce((total, t) => total + t.remembered_entities, 0);
  $("card-members").textContent = members.length;
  $("card-types").textContent = overview.types.length;
  $("card-live").textContent = live;
  $("card-remembered").textContent = remembered;
  $("card-outbox").textContent = sum(nodes, "outbox_depth");
  $("card-reminders").textContent = sum(nodes, "reminders_pending");
  $("card-throttled").textContent = sum(nodes, "throttled");
  $("card-moves").textContent = overview.moves.length;

  const last = rates[rates.length - 1];
  for (const [key, label] of [["messages", "messages"], ["errors", "errors"], ["commits", "commits"]]) {
    sparkline($("chart-" + key), rates.map((rate) => rate[key]), "spark-" + key);
    $("rate-" + label).textContent = last ? last[key].toFixed(1) + "/s" : "…";
  }

  fill($("members"), members.map((member) => {
    const row = document.createElement("tr");
    row.dataset.node = member.node;
    const counters = byNode[member.node] || {};
    cell(row, member.node + (member.node === cluster.primary ? " ★" : ""));
    cell(row, member.state, "state-" + member.state);
    cell(row, member.reachable ? "yes" : "no", member.reachable ? "" : "unreachable");
    cell(row, (member.roles || []).join(", "));
    cell(row, member.lag, "num");
    cell(row, member.shards, "num");
    for (const field of ["messages", "message_errors", "commits", "outbox_depth", "reminders_pending", "throttled"]) {
      cell(row, counters[field], "num");
    }
    return row;
  }), "no members", 12);
  $("unanswered").textContent = overview.unanswered.length === 0 ? "" :
    "No counters from: " + overview.unanswered.map((u) => u.node + " (" + u.error + ")").join("; ");

  renderShardMap(overview.num_shards, shards, members, nodeIndex);

  const partitions = cluster.partitions || [];
  fill($("partitions"), partitions.map((placement) => {
    const row = document.createElement("tr");
    row.dataset.partition = String(placement.partition);
    cell(row, placement.partition, "num");
    cell(row, placement.replicas.map((node, i) => i === 0 ? node + " ★" : node).join(", "), "replicas");
    cell(row, placement.generation, "num");
    return row;
  }), "the partition plane is off (sharding.partitions.count = 0)", 3);
  document.body.dataset.partitions = String(partitions.length);

  fill($("types"), overview.types.map((type) => {
    const row = document.createElement("tr");
    row.dataset.tenant = type.tenant;
    row.dataset.type = type.type;
    cell(row, type.tenant);
    cell(row, type.type);
    cell(row, type.active_version, "num");
    cell(row, type.versions, "num");
    cell(row, type.remember ? "yes" : "no");
    cell(row, type.live_entities, "num live");
    cell(row, type.remembered_entities, "num remembered");
    return row;
  }), "no types deployed", 7);

  fill($("moves"), overview.moves.map((move) => {
    const row = document.createElement("tr");
    cell(row, move.type);
    cell(row, move.shard, "num");
    cell(row, move.from);
    cell(row, move.to);
    cell(row, move.generation, "num");
    return row;
  }), "none", 5);

  document.body.dataset.members = String(members.length);
  document.body.dataset.types = String(overview.types.length);
  document.body.dataset.ready = "true";
}

function renderShardMap(numShards, shards, members, nodeIndex) {
  const legend = $("legend");
  legend.replaceChildren();
  const owned = {};
  for (const shard of shards) owned[shard.node] = (owned[shard.node] || 0) + 1;
  for (const member of members) {
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch node-" + (nodeIndex[member.node] % 8);
    item.append(swatch, document.createTextNode(member.node + ": " + (owned[member.node] || 0) + " shard(s)"));
    legend.append(item);
  }
  const byType = {};
  for (const shard of shards) (byType[shard.type] = byType[shard.type] || {})[shard.shard] = shard.node;
  const map = $("shard-map");
  map.replaceChildren();
  const names = Object.keys(byType).sort();
  if (names.length === 0) {
    map.textContent = "no shard allocated yet (a shard is allocated on its first message)";
  }
  for (const name of names) {
    const row = document.createElement("div");
    row.className = "shard-row";
    const label = document.createElement("span");
    label.className = "name";
    label.textContent = name;
    const rows = Math.ceil(numShards / SHARDS_PER_ROW);
    const width = Math.min(numShards, SHARDS_PER_ROW) * 9;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + rows * 9);
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(rows * 9));
    for (let shard = 0; shard < numShards; shard += 1) {
      const node = byType[name][shard];
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("x", String((shard % SHARDS_PER_ROW) * 9));
      rect.setAttribute("y", String(Math.floor(shard / SHARDS_PER_ROW) * 9));
      rect.setAttribute("width", "8");
      rect.setAttribute("height", "8");
      rect.setAttribute("class", node === undefined ? "node-none" : "node-" + (nodeIndex[node] % 8));
      const title = document.createElementNS(SVG, "title");
      title.textContent = "shard " + shard + ": " + (node === undefined ? "not allocated" : node);
      rect.append(title);
      svg.append(rect);
    }
    row.append(label, svg);
    map.append(row);
  }
}

async function logIn(event) {
  event.preventDefault();
  const given = $("token").value.trim();
  if (!given) return;
  try {
    await api("/v1/overview", given);
  } catch (error) {
    $("login-error").textContent = error instanceof Unauthorized
      ? "That is not the admin token." : "Could not reach the node: " + error.message;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, given);
  $("token").value = "";
  rates.length = 0;
  previous = null;
  poll();
}

function logOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  rates.length = 0;
  previous = null;
  showLogin();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", logIn);
  $("logout").addEventListener("click", logOut);
  takeTokenFromFragment();
  if (token()) poll(); else showLogin();
});
