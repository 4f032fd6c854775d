// The page side of a run's recording (workers/browser/rrweb.py), run at the start of every document of the tab
// in the isolated world of workers/browser/world.py: it shares the page's DOM, and none of its JavaScript, so a page
// can neither reach the recorder nor replace what it uses (JSON, Array, Object are the world's own). rrweb's events
// are serialised as they come, held up to the run's byte budget (past it the recorder stops and says so), and taken
// by the worker in chunks. Every answer carries the run's token, which only this world holds.
// Masking, before an event exists: password inputs; every element a secret was typed into (marked while the worker
// types one: `guard`), with its subtree; text and input values holding four consecutive characters of a secret's
// forms (`secrets`), also across the short pieces of one element (an OTP in six boxes, a value split in spans).
(function (rrweb, name, token, until, budget, maxEvents) {
  if (window !== window.top || globalThis[name] || (until && Date.now() > until)) return;
  var MASK = "********"; // a constant: the mask does not tell a secret's length
  var parts = [], held = 0, capped = false, stopped = false, stopRecording = null, timer = null;
  var marked = new WeakSet(), anyMarked = false, guarding = false, grams = null;

  function stop() {
    stopped = true;
    if (stopRecording) { stopRecording(); stopRecording = null; }
    clearTimeout(timer);
  }
  function mark(node) {
    if (node && node.nodeType === 1) { marked.add(node); anyMarked = true; }
  }
  function isMarked(el) {
    for (; anyMarked && el; el = el.parentElement || (el.getRootNode && el.getRootNode().host)) {
      if (marked.has(el)) return true;
    }
    return false;
  }
  function lower(text) { return text.replace(/[A-Z]/g, function (c) { return c.toLowerCase(); }); }
  function hits(text) { // where a four-character piece of a secret's form starts in text
    if (!grams || !text || text.length < 4) return null;
    var low = lower(text), found = null;
    for (var i = 0; i + 4 <= low.length; i++) {
      if (grams.has(low.substr(i, 4))) (found = found || []).push(i);
    }
    return found;
  }
  function starred(text) { return text.replace(/\S/g, "*"); }
  function around(el, inputs) { // the short text of an element and of its parent, spaces removed (pieces side by side)
    var out = [];
    for (var box = el, depth = 0; box && depth < 2; box = box.parentElement, depth++) {
      var text = "";
      if (inputs) {
        var fields = box.querySelectorAll("input, textarea");
        if (fields.length > 32) break;
        for (var i = 0; i < fields.length; i++) text += fields[i].value || "";
      } else {
        text = box.textContent || "";
      }
      if (text.length > 4096) break;
      out.push(text.replace(/\s+/g, ""));
    }
    return out;
  }
  function maskText(text, el) {
    if (isMarked(el)) return starred(text);
    if (guarding) return starred(text); // what the page shows while a secret is typed: its echo, its prefixes
    var found = hits(text);
    if (found) {
      var chars = text.split("");
      found.forEach(function (i) { for (var j = i; j < i + 4; j++) chars[j] = "*"; });
      return chars.join("");
    }
    if (grams && text.replace(/\s+/g, "").length < 4 && around(el, false).some(hits)) return starred(text);
    return text;
  }
  function maskInput(text, el) {
    if (!text || !el) return text;
    if (String(el.type).toLowerCase() === "password" || isMarked(el)) return MASK;
    if (hits(text) || (grams && text.length < 4 && around(el, true).some(hits))) {
      mark(el); // once it held a secret, every later value of it is masked too
      return MASK;
    }
    return text;
  }
  // While the worker types a secret, whatever element gets the focus or the keys is a secret's: the field typed into,
  // and the next boxes an OTP widget moves the focus to (the keys mark a field that has the focus already). Listening
  // from the document's start, before the page's own listeners.
  ["focusin", "keydown", "beforeinput", "input", "paste", "compositionstart"].forEach(function (type) {
    addEventListener(type, function (event) { if (guarding) mark(event.composedPath()[0]); }, true);
  });

  timer = until ? setTimeout(stop, Math.max(0, until - Date.now())) : null;
  stopRecording = rrweb.record({
    emit: function (event) {
      if (stopped || event.type === 5) return; // custom events: step markers come from the worker alone
      var text = JSON.stringify(event);
      if (held + text.length > budget || parts.length >= maxEvents) { // the run's budget: nothing more is kept
        capped = true;
        stop();
        return;
      }
      parts.push(text);
      held += text.length;
    },
    maskAllInputs: true, maskInputFn: maskInput, maskTextSelector: "*", maskTextFn: maskText,
    sampling: { mousemove: 100, scroll: 150, media: 800, input: "last" },
    recordCanvas: false, collectFonts: false, inlineStylesheet: true,
  }) || null;
  if (stopped) stop(); // it stopped inside rrweb's first snapshot, before rrweb handed its stop function back

  globalThis[name] = Object.freeze({
    // At most maxChars of events (one event at least), as a JSON array; `remaining`: what the run may still take.
    drain: function (maxChars, remaining) {
      var count = 0, size = 0;
      while (count < parts.length && (!count || size + count + parts[count].length <= maxChars)) {
        size += parts[count].length;
        count++;
      }
      var text = "[" + parts.splice(0, count).join(",") + "]";
      held -= size;
      budget = Math.max(0, remaining - size);
      return { token: token, events: text, more: parts.length > 0, capped: capped };
    },
    stop: function () { stop(); parts = []; held = 0; return { token: token }; },
    // (Not the focused element: the field typed into before, whose value is committed as the focus leaves it.)
    guard: function (on) { guarding = !!on; return { token: token }; },
    secrets: function (forms) {
      grams = new Set();
      forms.forEach(function (form) {
        var low = lower(form);
        for (var i = 0; i + 4 <= low.length; i++) grams.add(low.substr(i, 4));
      });
      if (!grams.size) grams = null;
      return { token: token };
    },
  });
})
