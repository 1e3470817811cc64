// Stepwell UI: live updates without a full reload, and the queue charts.
// Every element with a data-live attribute and an id is fetched again from
// the same URL and swapped in place; nothing else of the page changes. A
// run's page stops once the run ended (data-follow="false"). No inline
// script, no framework: the page works without this file too.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh"), 10) || 2000;
  var timer = null;
  var samples = {}; // queue name -> [{t, pending, scheduled, running, dead}]
  var keepMs = 10 * 60 * 1000;

  function busy(el) {
    // Leave alone a region the user is typing in.
    var a = document.activeElement;
    if (a && el.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA")) return true;
    var inputs = el.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < inputs.length; i++) if (inputs[i].value !== inputs[i].defaultValue) return true;
    return false;
  }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Stepwell-Live": "1" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var live = document.querySelectorAll("[data-live][id]");
        for (var i = 0; i < live.length; i++) {
          var el = live[i];
          var next = doc.getElementById(el.id);
          if (next && !busy(el)) el.replaceWith(document.importNode(next, true));
        }
        var follow = doc.body && doc.body.getAttribute("data-follow");
        if (follow) body.setAttribute("data-follow", follow);
        sample();
        schedule();
      })
      .catch(function () { schedule(); });
  }

  function schedule() {
    clearTimeout(timer);
    if (body.getAttribute("data-follow") === "false") return;
    timer = setTimeout(refresh, every);
  }

  // Queue charts: one canvas per queue, drawn from this page's samples.
  var series = [["pending", "#c99a06"], ["scheduled", "#8a8f98"], ["running", "#2457a6"], ["dead", "#d9534f"]];

  var taken = 0;

  function sample() {
    var rows = document.querySelectorAll("tr.qrow");
    if (!rows.length) return;
    var now = Date.now();
    taken++;
    var list = document.getElementById("chart-list");
    if (list) list.setAttribute("data-samples", String(taken));
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i], name = r.getAttribute("data-queue");
      var s = samples[name] || (samples[name] = []);
      s.push({ t: now, pending: +r.getAttribute("data-pending"), scheduled: +r.getAttribute("data-scheduled"),
        running: +r.getAttribute("data-running"), dead: +r.getAttribute("data-dead") });
      while (s.length && s[0].t < now - keepMs) s.shift();
    }
    draw();
  }

  function canvasFor(name) {
    var list = document.getElementById("chart-list");
    var id = "chart-" + name;
    var c = document.getElementById(id);
    if (!c) {
      var h = document.createElement("h3");
      h.className = "mono";
      h.textContent = name;
      c = document.createElement("canvas");
      c.id = id;
      c.setAttribute("aria-label", "depth of queue " + name);
      list.appendChild(h);
      list.appendChild(c);
    }
    return c;
  }

  function draw() {
    if (!document.getElementById("chart-list")) return;
    Object.keys(samples).sort().forEach(function (name) {
      var s = samples[name], c = canvasFor(name);
      var w = c.clientWidth || 600, h = c.clientHeight || 120, ratio = window.devicePixelRatio || 1;
      c.width = w * ratio; c.height = h * ratio;
      var g = c.getContext("2d");
      g.scale(ratio, ratio);
      g.clearRect(0, 0, w, h);
      var max = 1;
      s.forEach(function (p) { series.forEach(function (k) { max = Math.max(max, p[k[0]]); }); });
      var t1 = s[s.length - 1].t, t0 = Math.min(s[0].t, t1 - 10000);
      var pad = 18;
      g.fillStyle = "#5f6b76"; g.font = "10px sans-serif";
      g.fillText(String(max), 2, 10);
      g.fillText(Math.round((t1 - t0) / 1000) + "s", w - 30, h - 4);
      series.forEach(function (k) {
        g.strokeStyle = k[1]; g.lineWidth = 1.5; g.beginPath();
        s.forEach(function (p, i) {
          var x = pad + (w - 2 * pad) * (p.t - t0) / Math.max(t1 - t0, 1);
          var y = h - pad - (h - 2 * pad) * p[k[0]] / max;
          if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
        });
        g.stroke();
        var last = s[s.length - 1];
        g.fillStyle = k[1];
        g.fillRect(pad + (w - 2 * pad) * (last.t - t0) / Math.max(t1 - t0, 1) - 2,
          h - pad - (h - 2 * pad) * last[k[0]] / max - 2, 4, 4);
      });
    });
  }

  sample();
  schedule();
})();
