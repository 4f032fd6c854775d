// Remote Dispatch console: live updates by polling the console's .json views. Everything shown is
// set with textContent (never as HTML), so prompts and outputs can hold any text.
"use strict";
(function () {
  var POLL_MS = 1000;
  var LABELS = {"pending": "Running", "success": "Succeeded", "error": "Failed", "input-required": "Needs input"};
  var ICONS = {"pending": "◌", "success": "✓", "error": "✗", "input-required": "?", "cancelled": "⊘"};

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    var m = Math.floor(seconds / 60), s = Math.floor(seconds % 60);
    return m ? m + " min " + s + " s" : s + " s";
  }
  function ms(value) {
    if (value === null || value === undefined) return "";
    return value >= 1000 ? (value / 1000).toFixed(1) + " s" : value + " ms";
  }
  function when(value) { return value ? String(value).replace("T", " ").slice(0, 19) + " UTC" : "—"; }
  function setBadge(container, status, label) {
    var badge = container.querySelector("[data-status-badge]");
    if (!badge) return;
    badge.className = "status status-" + status;
    badge.querySelector(".status-icon").textContent = ICONS[status] || "•";
    badge.querySelector(".status-text").textContent = label || LABELS[status] || status;
  }
  function getJSON(url) {
    return fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); });
  }

  // Tasks list: rows of running tasks follow their progress.
  function watchList(table) {
    var base = table.getAttribute("data-progress-url");
    function tick() {
      var rows = table.querySelectorAll("tr[data-active='true']");
      if (!rows.length) return;
      var query = Array.prototype.map.call(rows, function (r) {
        return "id=" + encodeURIComponent(r.getAttribute("data-task-id"));
      }).join("&");
      getJSON(base + "?" + query).then(function (body) {
        body.tasks.forEach(function (t) {
          var row = table.querySelector("tr[data-task-id='" + CSS.escape(t.id) + "']");
          if (!row) return;
          setBadge(row, t.badge, t.statusLabel);
          row.querySelector(".cell-actions").textContent = t.actions;
          row.querySelector(".cell-elapsed").textContent = duration(t.elapsedSeconds);
          row.setAttribute("data-active", t.active ? "true" : "false");
        });
      }).catch(function () {}).then(function () { setTimeout(tick, POLL_MS); });
    }
    setTimeout(tick, POLL_MS);
  }

  // A task page: status, usage, timeline, output, question and deliveries while it is active.
  function watchTask(article) {
    var url = article.getAttribute("data-state-url");
    var shown = document.querySelectorAll("#timeline li").length;
    function show(id, visible) { var n = document.getElementById(id); if (n) n.hidden = !visible; }
    function render(t) {
      article.setAttribute("data-status", t.status);
      setBadge(document.getElementById("task-status"), t.badge, t.statusLabel);
      document.getElementById("started").textContent = when(t.startedAt);
      document.getElementById("completed").textContent = when(t.completedAt);
      document.getElementById("elapsed").textContent = duration(t.elapsedSeconds);
      document.getElementById("actions").textContent = t.actions;
      document.getElementById("credits").textContent = t.credits;
      var timeline = document.getElementById("timeline");
      if (t.trace.length < shown) { timeline.textContent = ""; shown = 0; }
      t.trace.slice(shown).forEach(function (e) {
        var li = el("li", "step" + (e.failed ? " failed" : ""));
        var action = el("span", "step-action");
        if (e.failed) { action.appendChild(el("strong", "fail-mark", "Failed:")); action.appendChild(document.createTextNode(" ")); }
        action.appendChild(document.createTextNode(e.action));
        li.appendChild(action);
        if (e.reason) li.appendChild(el("span", "step-reason", "Reason: " + e.reason));
        if (e.waited) li.appendChild(el("span", "step-waited", e.waited.charAt(0).toUpperCase() + e.waited.slice(1)));
        li.appendChild(el("span", "step-url", e.url));
        li.appendChild(el("span", "step-duration", ms(e.durationMs)));
        timeline.appendChild(li);
      });
      shown = t.trace.length;
      show("trace-empty", !shown);
      show("cancel-form", t.canCancel);
      show("answer-box", t.canAnswer);
      document.getElementById("question").textContent = t.question || "";
      document.getElementById("input-id").value = t.inputId || "";
      show("output-empty", !t.output);
      show("output", !!t.output);
      document.getElementById("output").textContent = t.output ? t.output.text : "";
      var check = document.getElementById("output-check");
      check.hidden = !t.output || !t.output.check;
      check.textContent = t.output && t.output.check ? t.output.check : "";
      if (t.hasGif && !document.getElementById("gif")) {
        var img = el("img");
        img.id = "gif";
        img.alt = "Animated recording of the task's browser, one frame per action";
        img.src = article.getAttribute("data-gif-url");
        document.getElementById("gif-box").appendChild(img);
        show("gif-box", true);
      }
      if (t.hasRecording && !t.canCancel && !document.getElementById("recording")) {
        var frame = el("iframe", "player-frame");
        frame.id = "recording";
        frame.title = "Recording of the task's browser";
        frame.src = article.getAttribute("data-player-url");
        document.getElementById("recording-box").appendChild(frame);
        show("recording-box", true);
      }
      renderDeliveries(t.deliveries);
    }
    function renderDeliveries(deliveries) {
      var box = document.getElementById("deliveries");
      if (!deliveries.length || box.getAttribute("data-count") === String(deliveries.length) + deliveries.map(function (d) { return d.state + d.attempts.length; }).join()) return;
      // New deliveries or attempts: the server-rendered list (with its Redeliver forms) is reloaded in place.
      fetch(location.href, {credentials: "same-origin"}).then(function (r) { return r.text(); }).then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("deliveries");
        if (fresh) box.replaceChildren.apply(box, Array.prototype.slice.call(fresh.childNodes));
        box.setAttribute("data-count", String(deliveries.length) + deliveries.map(function (d) { return d.state + d.attempts.length; }).join());
      }).catch(function () {});
    }
    var settled = 0;
    function tick() {
      getJSON(url).then(function (t) {
        render(t);
        var active = t.status === "pending" || t.status === "input-required";
        var pendingHook = t.deliveries.some(function (d) { return d.state === "pending"; });
        settled = active || pendingHook || (t.callbackUrl && !t.deliveries.length) ? 0 : settled + 1;
      }).catch(function () {}).then(function () {
        if (settled < 3) setTimeout(tick, POLL_MS);
      });
    }
    var initial = document.querySelectorAll("#deliveries .delivery");
    if (initial.length) {
      var states = Array.prototype.map.call(initial, function (d) {
        return d.querySelector(".delivery-state").textContent + d.querySelectorAll("tbody tr td[data-label='#']").length;
      });
      document.getElementById("deliveries").setAttribute("data-count", String(initial.length) + states.join());
    }
    setTimeout(tick, POLL_MS);
  }

  // New task: the schema editor is checked (JSON, then JSON Schema on the server) before submitting.
  function schemaEditor(form) {
    var area = document.getElementById("responseFormat");
    var status = document.getElementById("schema-status");
    var button = document.getElementById("check-schema");
    function localCheck() {
      var text = area.value.trim();
      if (!text) { status.textContent = "Leave empty for a text answer."; area.removeAttribute("aria-invalid"); return true; }
      try { JSON.parse(text); } catch (err) {
        status.textContent = "Not valid JSON: " + err.message;
        area.setAttribute("aria-invalid", "true");
        return false;
      }
      area.removeAttribute("aria-invalid");
      status.textContent = "Valid JSON. It is checked as a JSON Schema before the task starts.";
      return true;
    }
    function serverCheck() {
      var data = new URLSearchParams();
      data.set("csrf_token", form.querySelector("input[name='csrf_token']").value);
      data.set("responseFormat", area.value);
      return fetch(button.getAttribute("data-check-url"), {method: "POST", credentials: "same-origin", body: data})
        .then(function (r) { return r.json(); })
        .then(function (body) {
          status.textContent = body.message;
          if (body.valid) area.removeAttribute("aria-invalid"); else area.setAttribute("aria-invalid", "true");
          return body.valid;
        });
    }
    area.addEventListener("input", localCheck);
    button.addEventListener("click", function () { if (localCheck()) serverCheck().catch(function () {}); });
    form.addEventListener("submit", function (event) {
      if (form.getAttribute("data-checked") === "yes" || !area.value.trim()) return;
      event.preventDefault();
      if (!localCheck()) { area.focus(); return; }
      serverCheck().then(function (valid) {
        if (valid) { form.setAttribute("data-checked", "yes"); form.requestSubmit ? form.requestSubmit() : form.submit(); }
        else area.focus();
      }).catch(function () { form.setAttribute("data-checked", "yes"); form.submit(); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.querySelector("table.tasks[data-progress-url]");
    if (table) watchList(table);
    var article = document.querySelector("article.task[data-state-url]");
    if (article) watchTask(article);
    var form = document.getElementById("new-task-form");
    if (form) schemaEditor(form);
  });
})();
