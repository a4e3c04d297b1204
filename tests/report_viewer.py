"""Reading the report's trace viewer in tests: its data in Python, its rendering under node.

`decode(report, link)` reads a viewer link (`trace.html#c0003.17`) back to the
trace record it shows, from the chunk file, in Python. `render(report, link)`
runs the viewer page's own script under node (when installed) on that chunk,
as a browser would after loading it: the decoded trace and the HTML the page
puts on screen.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from eairdsl.study.viewer import decode_chunk, decode_trace

_LINK = re.compile(r"trace\.html#(c\d{4,})\.(\d+)$")

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
  body: {appendChild(s) {
    loaded.push(s.src);
    const file = path.join(folder, s.src);
    if (!file.startsWith(folder + path.sep) || !fs.existsSync(file)) { s.onerror(); return; }
    vm.runInContext(fs.readFileSync(file, "utf8"), ctx);
  }},
};
vm.createContext(ctx);
vm.runInContext(script, ctx);
setTimeout(() => {
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
