// The live view (app/live): the browser's frames arrive over a WebSocket; in control mode a person's mouse,
// wheel and keys go back as small JSON messages the server validates and turns into input (never CDP).
(function () {
  "use strict";
  var BUTTONS = ["left", "middle", "right"];
  var LABELS = {agent: "The agent is driving", pausing: "Pausing the agent…",
                person: "You have control", waiting: "The agent asks for a person", idle: "No agent is running"};

  function modifiers(ev) {
    return (ev.altKey ? 1 : 0) | (ev.ctrlKey ? 2 : 0) | (ev.metaKey ? 4 : 0) | (ev.shiftKey ? 8 : 0);
  }

  function start(box) {
    var img = box.querySelector(".live-frame"), status = box.querySelector(".live-status");
    var where = box.querySelector(".live-url"), step = box.querySelector(".live-step");
    var note = box.querySelector(".live-note");
    var take = box.querySelector(".live-take"), back = box.querySelector(".live-handback");
    var ws = new WebSocket(box.dataset.liveUrl.replace(/^http/, "ws") + "/socket");
    var size = null, control = "", lastMove = 0;

    function send(message) {
      if (ws.readyState === 1) { ws.send(JSON.stringify(message)); }
    }
    function driving() { return control === "person" || control === "idle"; }
    // Input before control is granted is not sent, and the person is told so (never dropped without a word).
    function notYours() {
      note.textContent = control === "pausing" ? "Not sent: the agent is pausing; you have control in a moment."
        : control === "waiting" || control === "agent" ? "Not sent: take control first." : "Not sent: no picture yet.";
    }
    function point(ev) {
      var r = img.getBoundingClientRect();
      var x = (ev.clientX - r.left) * size[0] / r.width, y = (ev.clientY - r.top) * size[1] / r.height;
      return {x: Math.max(0, Math.min(size[0] - 1, x)), y: Math.max(0, Math.min(size[1] - 1, y))};
    }
    function mouse(event, ev) {
      if (!size || !driving()) {
        if (event === "down") { notYours(); }
        return;
      }
      var p = point(ev), m = {type: "mouse", event: event, x: p.x, y: p.y, modifiers: modifiers(ev)};
      if (event !== "move") { m.button = BUTTONS[ev.button] || "left"; m.clickCount = Math.min(ev.detail || 1, 3); }
      send(m);
    }

    ws.onmessage = function (ev) {
      var m = JSON.parse(ev.data);
      if (m.type === "frame") {
        img.src = "data:image/jpeg;base64," + m.data;
        size = [m.width, m.height];
        box.dataset.frames = String(Number(box.dataset.frames) + 1);
      } else if (m.type === "state") {
        var before = control;
        control = m.control;
        if (before !== control && driving()) { note.textContent = ""; }  // the "Not sent" note is outdated
        box.dataset.control = control;
        status.textContent = m.problem || LABELS[control] || control;
        where.textContent = m.url || "";
        step.textContent = m.waiting ? "Asks for a person: " + m.waiting : (m.step ? "Step: " + m.step : "");
        if (take) {
          take.hidden = !(control === "agent" || control === "waiting");
          back.hidden = !(control === "person" || control === "pausing" || control === "waiting");
        }
      } else if (m.type === "error") {
        note.textContent = m.message;
      } else if (m.type === "ended") {
        status.textContent = m.message;
        box.dataset.ended = "1";
        if (take) { take.hidden = true; back.hidden = true; }
      }
    };
    ws.onclose = function () {
      if (!box.dataset.ended) { status.textContent = "The live view is closed (the link may have expired)."; }
    };
    if (box.dataset.mode !== "control") { return; }
    take.addEventListener("click", function () { send({type: "take"}); });
    back.addEventListener("click", function () { send({type: "handback"}); });
    img.addEventListener("mousedown", function (ev) { ev.preventDefault(); img.focus(); mouse("down", ev); });
    img.addEventListener("mouseup", function (ev) { mouse("up", ev); });
    img.addEventListener("mousemove", function (ev) {
      if (ev.timeStamp - lastMove > 30) { lastMove = ev.timeStamp; mouse("move", ev); }
    });
    img.addEventListener("contextmenu", function (ev) { ev.preventDefault(); });
    // Wheel events come at the screen's rate: summed and sent at most every 50 ms (the server's input rate).
    var wheel = null;
    img.addEventListener("wheel", function (ev) {
      if (!size || !driving()) { notYours(); return; }
      ev.preventDefault();
      if (wheel) { wheel.deltaX += ev.deltaX; wheel.deltaY += ev.deltaY; return; }
      var p = point(ev);
      wheel = {type: "wheel", x: p.x, y: p.y, deltaX: ev.deltaX, deltaY: ev.deltaY};
      setTimeout(function () {
        wheel.deltaX = Math.max(-10000, Math.min(10000, wheel.deltaX));
        wheel.deltaY = Math.max(-10000, Math.min(10000, wheel.deltaY));
        send(wheel);
        wheel = null;
      }, 50);
    }, {passive: false});
    function key(event, ev) {
      if (!driving()) {
        if (event === "down") { notYours(); }
        return;
      }
      ev.preventDefault();
      var printable = ev.key.length === 1 && !ev.ctrlKey && !ev.metaKey && !ev.altKey;
      if (printable) {
        if (event === "down") { send({type: "text", text: ev.key}); }
        return;
      }
      send({type: "key", event: event, key: ev.key.slice(0, 32), code: (ev.code || "").slice(0, 32),
            keyCode: ev.keyCode & 255, modifiers: modifiers(ev)});
    }
    img.addEventListener("keydown", function (ev) { key("down", ev); });
    img.addEventListener("keyup", function (ev) { key("up", ev); });
  }

  document.querySelectorAll("[data-live-url]").forEach(start);
})();
