"""Reading the report's trace viewer in tests: its data in Python, its rendering under node.

`decode(report, link)` reads a viewer link (`trace.html#c0003.17`) back to the
trace record it shows, from the chunk file, in Python. `render(report, link)`
runs the viewer page's own script under node (when installed) on that chunk,
as a browser would after loading it: the decoded trace and the HTML the page
puts on screen.

The episode list: `rows_html(report)` is every row of `episodes.html`, read
from its chunk files under `episodes/` in Python; `episode_page(report, steps)`
runs the list page's own script under node, loading its chunk files as a
browser does, then filters, sorts and pages as `steps` say and returns what
the table shows after each step.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from eairdsl.study.episode_list import episode_rows
from eairdsl.study.viewer import decode_chunk, decode_trace

_LINK = re.compile(r"trace\.html#(c\d{4,})\.(\d+)$")

#: a <script> element appended to the body runs its file from the page's folder in the
#: page's global, as a browser runs traces/cNNNN.js; then the page's own script runs
APPEND_RUNS_THE_FILE = r"""
  body: {appendChild(s) {
    loaded.push(s.src);
    const file = path.join(folder, s.src);
    if (!file.startsWith(folder + path.sep) || !fs.existsSync(file)) { s.onerror(); return; }
    vm.runInContext(fs.readFileSync(file, "utf8"), ctx);
  }},
};
vm.createContext(ctx);
vm.runInContext(script, ctx);
"""


HARNESS = r"""
const fs = require("fs"), vm = require("vm");
const [page, chunkFile, idx, extra] = process.argv.slice(2);
const html = fs.readFileSync(page, "utf8");
const script = /<script id="viewer">([\s\S]*?)<\/script>/.exec(html)[1];
const ctx = {atob, Blob, Response, DecompressionStream, JSON};
vm.createContext(ctx);
vm.runInContext(script, ctx);
const V = ctx.EAIRViewer;
let name = null, b64 = null;
ctx.eairTraceChunk = (n, b) => { name = n; b64 = b; };
vm.runInContext(fs.readFileSync(chunkFile, "utf8"), ctx);
const minutes = JSON.parse(extra || "[]");
V.inflate(b64).then(text => {
  const t = V.decodeTrace(JSON.parse(text), Number(idx));
  process.stdout.write(JSON.stringify({name: name, trace: t, html: V.render(t, name + "." + idx),
                                       minutes: minutes.map(V.fmtMinutes)}));
});
"""


BROWSER = r"""
// The viewer page's script with a minimal stand-in for the browser: location.hash is the
// link's, a <script> element appended to the body is the chunk file run in the same global
// (as a browser runs traces/cNNNN.js), innerHTML and attributes are recorded.
const fs = require("fs"), path = require("path"), vm = require("vm");
const [page, hash] = process.argv.slice(2);
const folder = path.dirname(page);
const html = fs.readFileSync(page, "utf8");
const script = /<script id="viewer">([\s\S]*?)<\/script>/.exec(html)[1];
const elements = {};
const loaded = [];
function element(id) {
  if (!elements[id]) {
    elements[id] = {id: id, innerHTML: "", textContent: "", attrs: {}, value: "",
                    setAttribute(k, v) { this.attrs[k] = v; },
                    addEventListener() {}, scrollIntoView() {}};
  }
  return elements[id];
}
const ctx = {atob, Blob, Response, DecompressionStream, JSON, setTimeout};
ctx.window = ctx;
ctx.location = {hash: hash};
ctx.addEventListener = () => {};
ctx.document = {
  title: "",
  getElementById: element,
  querySelectorAll: () => [],
  createElement: () => ({}),
""" + APPEND_RUNS_THE_FILE + r"""setTimeout(() => {
  process.stdout.write(JSON.stringify({
    loaded: loaded, title: ctx.document.title, heading: element("title").textContent,
    raw: element("raw").attrs.href || null, html: element("trace").innerHTML}));
}, 300);
"""


def open_page(report: Path, link: str) -> dict[str, Any]:
    """The viewer page opened at `link` (`trace.html#...`) in a stand-in browser under node:
    which scripts it loaded, its title, the raw trace link and the trace's HTML."""
    exe = node()
    assert exe is not None
    harness = report / "_browser.js"
    harness.write_text(BROWSER, encoding="utf-8")
    try:
        out = subprocess.run([exe, str(harness), str(report / "trace.html"),
                              "#" + link.split("#", 1)[1]],
                             check=True, capture_output=True, text=True, timeout=300)
    finally:
        harness.unlink()
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def parse(link: str) -> tuple[str, int]:
    found = _LINK.search(link)
    assert found, link
    return found.group(1), int(found.group(2))


def decode(report: Path, link: str) -> dict[str, Any]:
    name, i = parse(link)
    return decode_trace(decode_chunk(report / "traces" / f"{name}.js"), i)


def node() -> str | None:
    return shutil.which("node")


def render(report: Path, link: str, minutes: list[Any] | None = None) -> dict[str, Any]:
    """{"name", "trace", "html", "minutes"} from the viewer's script under node."""
    exe = node()
    assert exe is not None
    name, i = parse(link)
    harness = report / "_harness.js"
    harness.write_text(HARNESS, encoding="utf-8")
    try:
        out = subprocess.run([exe, str(harness), str(report / "trace.html"),
                              str(report / "traces" / f"{name}.js"), str(i),
                              json.dumps(minutes or [])],
                             check=True, capture_output=True, text=True, timeout=300)
    finally:
        harness.unlink()
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def rows_html(report: Path) -> str:
    """The episode list's rows, one per line, in the list's order (from its chunk files)."""
    return "\n".join(episode_rows(report))


EPISODES = r"""
// episodes.html's own script with a minimal stand-in for the browser: its <script>s appended
// to the body are the chunk files run in the same global, elements record what is set, and
// the steps (JSON) type, choose filters, click headings and page; after each, what is shown.
const fs = require("fs"), path = require("path"), vm = require("vm");
const [page, hash, stepsJson] = process.argv.slice(2);
const folder = path.dirname(page);
const html = fs.readFileSync(page, "utf8");
const script = /<script>([\s\S]*?)<\/script>/.exec(html)[1];
function element(attrs) {
  return {attrs: attrs || {}, value: "", textContent: "", innerHTML: "", disabled: false,
          listeners: {},
          getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; },
          setAttribute(k, v) { this.attrs[k] = String(v); },
          removeAttribute(k) { delete this.attrs[k]; },
          hasAttribute(k) { return k in this.attrs; },
          addEventListener(t, f) { (this.listeners[t] = this.listeners[t] || []).push(f); },
          fire(t) { (this.listeners[t] || []).forEach(f => f({})); }};
}
const table = /<table[^>]*id="episodes"[^>]*data-rows="(\d+)" data-chunks="(\d+)"/.exec(html);
const tbody = element();
// a sortable heading is <th data-sort="KEY"><button>…</button></th>: the script listens on
// the button
const thead = html.split("<thead>")[1].split("</thead>")[0];
const heads = [...thead.matchAll(/<th(?: data-sort="([^"]*)")?[^>]*>/g)]
  .map(m => { const th = element(m[1] === undefined ? {} : {"data-sort": m[1]});
              const button = m[1] === undefined ? null : element();
              th.button = button; th.querySelector = sel => sel === "button" ? button : null;
              return th; });
const tableEl = element({"data-rows": table[1], "data-chunks": table[2]});
tableEl.tBodies = [tbody];
tableEl.querySelectorAll = () => heads;
const selects = [...html.matchAll(/<select data-filter="([^"]+)">([\s\S]*?)<\/select>/g)]
  .map(m => { const s = element({"data-filter": m[1]});
              s.options = [...m[2].matchAll(/<option value="([^"]*)">/g)].map(o => ({value: o[1]}));
              return s; });
const ids = {episodes: tableEl, q: element(), count: element(), page: element(),
             prev: element(), next: element(), "per-page": element()};
ids["per-page"].value = "100";
const loaded = [];
const ctx = {atob, Blob, Response, DecompressionStream, JSON, Intl, setTimeout, console};
ctx.window = ctx;
ctx.location = {hash: hash, pathname: "/report/episodes.html", search: ""};
const windowListeners = {}, history = [];
ctx.addEventListener = (t, f) => { (windowListeners[t] = windowListeners[t] || []).push(f); };
ctx.history = {replaceState(state, title, url) {  // no hashchange, as in a browser
  history.push(url); ctx.location.hash = url.startsWith("#") ? url : ""; }};
ctx.document = {
  getElementById: id => ids[id] || null,
  querySelectorAll: sel => sel === "select[data-filter]" ? selects : [],
  createElement: () => element(),
""" + APPEND_RUNS_THE_FILE + r"""function shown() {
  return {count: ids.count.textContent, page: ids.page.textContent,
          prev: ids.prev.disabled, next: ids.next.disabled,
          rows: tbody.innerHTML ? tbody.innerHTML.split(/(?=<tr\b)/) : [],
          sorted: heads.map(h => h.getAttribute("aria-sort")), hash: ctx.location.hash,
          text: ids.q.value, filters: Object.fromEntries(selects.filter(s => s.value !== "")
            .map(s => [s.attrs["data-filter"], s.value])),
          replaced: history.length};
}
function whenLoaded(then, waited, settled) {  // the chunks inflate asynchronously
  const done = !ids.count.textContent.startsWith("loading");
  if ((done && settled) || waited > 120000) { then(); return; }
  setTimeout(() => whenLoaded(then, waited + 100, done), 100);  // done twice in a row
}
whenLoaded(() => {
  const out = [{step: "open", loaded: loaded, ...shown()}];
  for (const step of JSON.parse(stepsJson)) {
    const [what, a, b] = step;
    if (what === "text") { ids.q.value = a; ids.q.fire("input"); }
    else if (what === "filter") { const s = selects.find(x => x.attrs["data-filter"] === a);
                                  s.value = b; s.fire("change"); }
    else if (what === "sort") { (heads[a].button || heads[a]).fire("click"); }
    else if (what === "hash") { ctx.location.hash = a;
                                (windowListeners.hashchange || []).forEach(f => f({})); }
    else if (what === "per-page") { const pp = ids["per-page"]; pp.value = String(a);
                                    pp.fire("change"); }
    else if (what === "next" || what === "prev") { ids[what].fire("click"); }
    out.push({step: step, ...shown()});
  }
  process.stdout.write(JSON.stringify(out));
}, 0, false);
"""


def episode_page(report: Path, steps: list[list[Any]], hash: str = "") -> list[dict[str, Any]]:
    """episodes.html's script under node: after opening (chunk files loaded) and after each
    step (`["text", words]`, `["filter", key, value]`, `["sort", column]` (a click on the
    heading's button), `["per-page", n]`, `["next"]`, `["prev"]`, `["hash", "#…"]` (the
    address's hash changed: a hashchange event)), the count and page lines, whether the
    pager's buttons are disabled, the rows in the table (their HTML), each heading's
    aria-sort, the address's hash, the text box, the chosen filters and how many times the
    script replaced the address (history.replaceState)."""
    exe = node()
    assert exe is not None
    harness = report / "_episodes.js"
    harness.write_text(EPISODES, encoding="utf-8")
    try:
        out = subprocess.run([exe, str(harness), str(report / "episodes.html"), hash,
                              json.dumps(steps)], check=True, capture_output=True, text=True,
                             timeout=300)
    finally:
        harness.unlink()
    data: list[dict[str, Any]] = json.loads(out.stdout)
    return data
