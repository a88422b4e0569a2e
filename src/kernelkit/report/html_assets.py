"""The HTML report's inline style sheet and script, as text (the report is one file: nothing is fetched).

The script is small and hand-written, and the page reads fine without it (SVG <title> tooltips, tables in their
default order). With it: hover tooltips on plot points, impl toggles across every plot, sortable and filterable
tables. It never parses markup out of data: text goes in with textContent only. When it has run it sets
``data-kk-ready`` on <body> ("N plots, M tables, K impls, P points"), which the headless-browser test reads.
"""

from __future__ import annotations

CSS = """
:root { --fg: #1d2430; --dim: #6b7280; --line: #d9dee7; --bg2: #f5f7fa; --ok: #15803d; --bad: #b91c1c;
        --warn: #a16207; }
* { box-sizing: border-box; }
body { font: 14px/1.45 "DejaVu Sans", system-ui, sans-serif; color: var(--fg); margin: 0 auto; padding: 16px 24px;
       max-width: 1500px; }
h1 { font-size: 22px; margin: 4px 0; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 16px 0 6px; }
nav a { margin-right: 14px; } .dim { color: var(--dim); }
.banner { background: #fff7e0; border: 1px solid #f0d890; padding: 6px 10px; margin: 8px 0; border-radius: 4px; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: var(--bg2); position: sticky; top: 0; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.sortable th { cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; } th[aria-sort="descending"]::after { content: " \\25BC"; }
.scroll { max-height: 720px; overflow: auto; border: 1px solid var(--line); }
code, pre { font: 12px/1.35 "DejaVu Sans Mono", monospace; }
code.repro { white-space: nowrap; color: #334155; cursor: text; }
td.clip { min-width: 110px; max-width: 180px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
td.clip.wide { min-width: 240px; max-width: 240px; }
#results-table td:not(.clip) { white-space: nowrap; }
pre.msg { white-space: pre-wrap; margin: 2px 0; max-width: 1100px; }
.st { font-weight: 600; white-space: nowrap; } .st-PASSED { color: var(--ok); } .st-SKIPPED { color: var(--dim); }
.st-WEAK { color: var(--warn); } .st-bad { color: var(--bad); }
.v-faster { color: var(--ok); } .v-slower { color: var(--bad); } .v-same { color: var(--dim); }
.suspect { color: var(--bad); font-weight: 600; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; background: var(--bg2); margin-right: 6px; }
.env td:first-child { color: var(--dim); white-space: nowrap; }
.env-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 0 18px;
            font-size: 12.5px; }
.env-grid div { border-bottom: 1px solid var(--line); padding: 2px 0; overflow-wrap: anywhere; }
.env-grid .k { color: var(--dim); margin-right: 8px; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(620px, 1fr)); gap: 14px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 4px; padding: 6px; }
figcaption { font-size: 12.5px; font-weight: 600; } figcaption .dim { font-weight: normal; }
svg.plot { width: 100%; height: auto; font: 11px "DejaVu Sans", sans-serif; }
svg .grid { stroke: #e5e7eb; } svg .axis { stroke: #6b7280; } svg .ceiling { stroke: #111; stroke-dasharray: 2 3; }
svg .roof { stroke: #111; fill: none; stroke-width: 1.6; }
svg .series { fill: none; stroke-width: 1.8; } svg .baseline { stroke-dasharray: 6 4; }
svg .band { stroke: none; opacity: 0.18; } svg .pt { stroke: #fff; stroke-width: 1; }
svg .legend { cursor: pointer; } svg .off, .off { display: none; } svg .legend.muted { opacity: 0.35; }
#impl-toggles label { margin-right: 12px; white-space: nowrap; }
#kk-tip { position: fixed; pointer-events: none; background: #111827; color: #fff; padding: 4px 8px;
          border-radius: 4px; font-size: 12px; white-space: pre; z-index: 10; }
input.filter { margin: 4px 0 6px; padding: 3px 6px; width: 320px; }
"""

JS = """
(function () {
  "use strict";
  var tip = document.createElement("div");
  tip.id = "kk-tip";
  tip.hidden = true;
  document.body.appendChild(tip);
  // A point's SVG <title> becomes its data-tip: our tooltip replaces the browser's (which would show it twice).
  var points = document.querySelectorAll("svg .pt");
  points.forEach(function (pt) {
    var title = pt.querySelector("title");
    if (title) { pt.setAttribute("data-tip", title.textContent); title.remove(); }
  });
  document.addEventListener("mouseover", function (e) {
    var el = e.target.closest ? e.target.closest("[data-tip]") : null;
    if (!el) { tip.hidden = true; return; }
    tip.textContent = el.getAttribute("data-tip");
    tip.hidden = false;
  });
  document.addEventListener("mousemove", function (e) {
    tip.style.left = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 4) + "px";
    tip.style.top = (e.clientY + 14) + "px";
  });

  // Impl toggles: one checkbox per impl hides or shows it in every plot; a legend entry toggles it too.
  var impls = [];
  document.querySelectorAll("svg [data-impl]").forEach(function (el) {
    var name = el.getAttribute("data-impl");
    if (impls.indexOf(name) < 0) { impls.push(name); }
  });
  var bar = document.getElementById("impl-toggles");
  var boxes = {};
  function setShown(name, shown) {
    document.querySelectorAll("svg [data-impl]").forEach(function (el) {
      if (el.getAttribute("data-impl") !== name) { return; }
      el.classList.toggle(el.classList.contains("legend") ? "muted" : "off", !shown);
    });
  }
  impls.sort().forEach(function (name) {
    var label = document.createElement("label");
    var box = document.createElement("input");
    box.type = "checkbox";
    box.checked = true;
    box.setAttribute("data-impl-toggle", name);
    box.addEventListener("change", function () { setShown(name, box.checked); });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + name));
    if (bar) { bar.appendChild(label); }
    boxes[name] = box;
  });
  document.querySelectorAll("svg .legend").forEach(function (item) {
    item.addEventListener("click", function () {
      var box = boxes[item.getAttribute("data-impl")];
      if (box) { box.checked = !box.checked; setShown(item.getAttribute("data-impl"), box.checked); }
    });
  });

  // Sortable tables: a header click sorts by that column (data-v, a number, when the cell has one; else text).
  function key(row, col) {
    var cell = row.cells[col];
    if (!cell) { return ""; }
    var v = cell.getAttribute("data-v");
    if (v !== null) { return v === "" ? null : parseFloat(v); }
    return cell.textContent.trim().toLowerCase();
  }
  var tables = document.querySelectorAll("table.sortable");
  tables.forEach(function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var asc = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a, col), y = key(b, col);
          if (x === null || y === null) { return (x === null) - (y === null); }  // empty cells last
          var c = x < y ? -1 : (x > y ? 1 : 0);
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  // A click on a repro command selects all of it (the cell may show only its start): ready to copy.
  document.querySelectorAll("code.repro").forEach(function (code) {
    code.addEventListener("click", function () {
      var range = document.createRange();
      range.selectNodeContents(code);
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
    });
  });
  // Filters: rows whose text does not hold every word typed are hidden.
  document.querySelectorAll("input.filter").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\\s+/).filter(Boolean);
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var text = row.textContent.toLowerCase();
        row.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
      });
    });
  });
  document.body.setAttribute("data-kk-ready", document.querySelectorAll("svg.plot").length + " plots, " +
                             tables.length + " tables, " + impls.length + " impls, " + points.length + " points");
})();
"""
