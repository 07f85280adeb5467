// The rates chart: requests per second by outcome over the last minutes, read from
// /api/rates every few seconds and drawn as SVG. No inline script: the page's CSP forbids it.
(function () {
  "use strict";
  var box = document.getElementById("rates");
  if (!box) { return; }
  var NS = "http://www.w3.org/2000/svg";
  var H = 160, PAD = 28;

  function el(name, attrs) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    return e;
  }

  function draw(data) {
    while (box.firstChild) { box.removeChild(box.firstChild); }
    if (!data.enabled) {
      var p = document.createElement("p");
      p.className = "muted";
      p.textContent = "Rates need the console of a running gateway.";
      box.appendChild(p);
      return;
    }
    var top = 1;
    data.groups.forEach(function (g) {
      data.series[g].forEach(function (v) { if (v > top) { top = v; } });
    });
    var n = Math.max(data.times.length, 2);
    var W = Math.max(box.clientWidth || 600, 200);
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "requests per second by outcome" });
    svg.appendChild(el("line", { x1: PAD, y1: H - PAD, x2: W, y2: H - PAD, "class": "axis" }));
    svg.appendChild(el("line", { x1: PAD, y1: 4, x2: PAD, y2: H - PAD, "class": "axis" }));
    var label = el("text", { x: 2, y: 12 });
    label.textContent = top.toFixed(top < 10 ? 1 : 0);
    svg.appendChild(label);
    var span = el("text", { x: PAD, y: H - 6 });
    span.textContent = "last " + Math.round(data.times.length * data.step_seconds / 60 * 10) / 10 + " min";
    svg.appendChild(span);
    data.groups.forEach(function (g) {
      var pts = data.series[g].map(function (v, i) {
        var x = PAD + (W - PAD) * i / (n - 1);
        var y = (H - PAD) - (H - PAD - 4) * v / top;
        return x.toFixed(1) + "," + y.toFixed(1);
      });
      if (pts.length > 0) {
        svg.appendChild(el("polyline", { points: pts.join(" "), "class": "s-" + g }));
      }
    });
    box.appendChild(svg);
    var legend = document.createElement("div");
    legend.className = "legend";
    data.groups.forEach(function (g) {
      var item = document.createElement("span");
      var sw = document.createElement("span");
      sw.className = "swatch s-" + g;
      item.appendChild(sw);
      item.appendChild(document.createTextNode(g + " " + (data.now[g] || 0).toFixed(1) + "/s"));
      item.setAttribute("data-group", g);
      legend.appendChild(item);
    });
    box.appendChild(legend);
  }

  function load() {
    fetch(box.getAttribute("data-src"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(draw)
      .catch(function () { box.textContent = "Rates unavailable."; });
  }
  load();
  setInterval(load, 5000);
})();

// The list of records refreshes itself: every few seconds the page's own URL (so its filters
// and cursor) is read again and its list replaced, until the operator pauses it. Paused stays
// paused across reloads of this tab. Nothing is read while the tab is hidden.
(function () {
  "use strict";
  var button = document.getElementById("live");
  var box = document.getElementById("records");
  if (!button || !box) { return; }
  var state = document.getElementById("live-state");
  var every = parseInt(button.getAttribute("data-interval"), 10) || 5000;
  var KEY = "idem-console-paused";
  var paused = false;
  try { paused = window.sessionStorage.getItem(KEY) === "1"; } catch (e) { /* storage off */ }

  function show() {
    button.textContent = paused ? "Resume updates" : "Pause updates";
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    state.textContent = paused ? "Updates paused." : "The list refreshes every " + Math.round(every / 1000) + "s.";
  }

  function refresh() {
    if (paused || document.hidden) { return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) { throw new Error(String(r.status)); }
        return r.text();
      })
      .then(function (html) {
        if (paused) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("records");
        if (fresh) {
          box.replaceChildren.apply(box, Array.prototype.slice.call(fresh.childNodes).map(function (n) { return document.importNode(n, true); }));
          box.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function (e) { state.textContent = "Refresh failed (" + e.message + "); retrying."; });
  }

  button.addEventListener("click", function () {
    paused = !paused;
    try { window.sessionStorage.setItem(KEY, paused ? "1" : "0"); } catch (e) { /* storage off */ }
    show();
    if (!paused) { refresh(); }
  });
  show();
  setInterval(refresh, every);
})();
