// The page side of a run's recording (workers/browser/recording.py), run at the start of every document of the tab.
// rrweb's recorder, kept off the page's globals; its events wait in a buffer until the worker drains them with
// each page view, and at pagehide in the tab's sessionStorage for the next page of the same site. Password inputs
// are masked by rrweb itself, before an event exists.
(function (rrweb, name, key, until, maxEvents) {
  if (window !== window.top || Object.getOwnPropertyDescriptor(window, name) || (until && Date.now() > until)) return;
  var events = [];
  try {
    var kept = sessionStorage.getItem(key);
    if (kept) { sessionStorage.removeItem(key); events = JSON.parse(kept) || []; }
  } catch (e) { /* no storage here (opaque origin): nothing was kept */ }
  var stopRecording = null;
  function stop() {
    if (stopRecording) { stopRecording(); stopRecording = null; }
    clearTimeout(timer);
  }
  // A page left recording after its run (a kept session's other tab) stops at the run's deadline. A pooled browser's
  // recorder has none (0): the browser ends with its run.
  var timer = until ? setTimeout(stop, Math.max(0, until - Date.now())) : null;
  stopRecording = rrweb.record({
    emit: function (event) {
      events.push(event);
      if (events.length > maxEvents) stop(); // nobody drains: bounded memory in the page
    },
    maskInputOptions: { password: true },
    sampling: { mousemove: 100, scroll: 150, media: 800, input: "last" },
    recordCanvas: false, collectFonts: false, inlineStylesheet: true,
  }) || null;
  addEventListener("pagehide", function () {
    if (!events.length) return;
    try { sessionStorage.setItem(key, JSON.stringify(events)); events = []; } catch (e) { /* quota: lost */ }
  });
  Object.defineProperty(window, name, { value: Object.freeze({
    drain: function () {
      var out = JSON.stringify(events);
      events = [];
      return out;
    },
    stop: function () {
      stop();
      try { sessionStorage.removeItem(key); } catch (e) { /* nothing kept */ }
    },
  }) });
})
