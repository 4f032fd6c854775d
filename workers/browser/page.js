/* Remote Dispatch page script: the page-side half of every browser driver (Selenium and the extension).
 *
 * One file, run unchanged in an isolated world by the Selenium driver (through CDP: page_script.py) and by the
 * extension's `chrome.scripting.executeScript({files: ["page.js"]})`. Running it defines
 * `window.__remoteDispatch` unless a copy of the same VERSION is already there; running it again is harmless.
 * It keeps no state in JavaScript variables: element numbers are stamped on the elements
 * (attribute `data-rd-index`), the next number and "this page has been read" on the top document's
 * <html> (`data-rd-next`, `data-rd-read`), so a fresh copy of the script sees the same numbers.
 *
 * Targets (every method that takes `target`): an element number (7 or "7" or "[7]"), a CSS selector, or
 * visible text. Resolution order: number; an interactive element whose label, name, id, placeholder,
 * aria-label or title equals the text (exactly, then ignoring case); a CSS selector matching a visible
 * element; an interactive element whose label contains the text (exact case first); the smallest visible
 * element containing the text. Several distinct elements matching at one level are an error that lists
 * them with their numbers ("ambiguous"), never a silent pick of the first.
 * Lookups reach into same-origin iframes and open shadow roots. An iframe of another origin cannot be entered
 * from here: read() lists it in `frames` (its number, src) and leaves a line `(frame N: src)` followed by a
 * placeholder `\u0001frame N\u0001` in the view, where the driver puts that frame's own view (WebDriver frame
 * switching, this script run in the frame).
 *
 * Every method returns plain JSON (so the extension can pass results back), except `element` and `frameToward`.
 * Actions return {ok: true, ...description} or {ok: false, error: "why"}.
 *
 *   version                       the script's version string
 *   read({maxChars})              -> {url, title, text, elements: [{index, tag, label, new, type?, role?,
 *                                    name?, href?, frame?}], truncated, status, next,
 *                                    frames: [{index, src}]}  (`next`: read's option `next` is reserved first)
 *                                    `status`: the main document's HTTP status (0 unknown, -1 an error page)
 *                                    The walk stops at maxChars; a cut view ends (at a whole line) with a
 *                                    marker saying what was left out and how to see it. Scrolled down,
 *                                    blocks wholly above the viewport are left out (and the view says so).
 *                                    `text` is the simplified view: visible text, and every visible interactive
 *                                    element as `[N]<tag attr="..">label</tag>`; elements numbered since the
 *                                    previous reading of this page are prefixed `*` and have `new: true`
 *                                    (nothing is new at the first reading). Password values are never shown.
 *   locate(target)                -> {ok, index, tag, label, inTop, href?, opensTab?} (stamps a number if the
 *                                    element had none; opensTab: a link or form with a target other than _self)
 *   element(target)               -> the DOM element or null (Selenium turns it into a WebElement)
 *   rank(target)                  -> {ok, kind, count, matches: [{index, tag, label}]}: what a text or selector
 *                                    matches here, by the strongest kind of match that has any (0 the strongest;
 *                                    count > 1: ambiguous); the driver compares documents of other origins
 *   frameToward(n)                -> [frame element or null, arrived]: the frame to switch into next on the way
 *                                    to the frame of another origin numbered n (read()'s `frames`): that frame,
 *                                    or the same-origin iframe that holds it (Selenium only, as `element`)
 *   click(target)                 -> {ok, index, tag, label, href?}: scrolls into view, pointer/mouse events, click()
 *   focus(target)                 -> {ok, ...}: scroll into view and focus (drivers then send real keys)
 *   type(target, text, {clear})   -> {ok, ...}: clear (default) and set the value with input/change events;
 *                                    never echoes `text` (it may hold a secret)
 *   select(target, option, {open})-> {ok, selected: "option text"}: a <select>'s option by value or text; on an
 *                                    ARIA combobox or listbox (role=combobox|listbox, aria-haspopup=listbox) the
 *                                    role=option whose text it is, clicked. While its options are not shown:
 *                                    {ok, pending: true}, after clicking the combobox open if `open` (the driver
 *                                    asks again until the options come); `widget: true` once one is chosen
 *   shows(target, text)           -> bool: the combobox (its value or text) or listbox (its selected option) shows it
 *   drag(source, target, {x, y})  -> {ok, html5, from: {x, y}, to: {x, y}, source: info, target: info|null}: the
 *                                    source dragged onto the target element, or by the offset (x, y) in pixels.
 *                                    A source that is draggable="true" (or in one) is dragged here, by HTML5
 *                                    drag-and-drop events sharing one DataTransfer (dragstart … drop, dragend;
 *                                    `accepted`: the drop target cancelled dragover, so drop was fired); any
 *                                    other is left to the driver's real pointer (down, moves, up from `from`
 *                                    to `to`, viewport points of the source's document)
 *   reserve(next)                 -> the next element number of this document, raised to `next` first: the driver
 *                                    keeps numbers unique across documents of other origins
 *   scroll(direction, target)     -> {ok, scrollY, atEnd}: "down"|"up"|"top"|"bottom", the page or an element
 *   hover(target)                 -> {ok, ...}: mouseover/mouseenter/mousemove
 *   extract(selector)             -> {ok, texts: [...]}: querySelectorAll in every reachable root, visible text
 *   hasText(text)                 -> bool: the visible text contains `text` (case-insensitive)
 *   hasElement(selector)          -> bool
 *   html()                        -> the top document's outerHTML
 *   readyState()                  -> the document's readyState ("loading", "interactive", "complete")
 *   match(selectors)              -> {ok, count, visible, index?, tag?, label?, text?}: the SDK's selector kinds
 *                                    ({id, dataTestId, name, ariaLabel, role, type, tagName, className,
 *                                    textContent, xpath, domPath: {value}}), all of them must hold
 *   property(target, name)        -> {ok, value}: a DOM property (or attribute) of the element, as a string
 *   center(target)                -> {ok, x, y}: the element scrolled into view, its centre in the viewport
 *   describe(target)              -> {ok, index, tag, role, name, text, label, attrs: {id, name, type, href,
 *                                    placeholder, data-*}, css, url, title}: how to find this element again
 *                                    (replay scripts), and the page it is on
 *   resolve(locator)              -> {ok, count, index?, matches: [{index, tag, name}], by, url, title}: every element a
 *                                    describe() locator matches now (strong keys first); count 1 is the only
 *                                    unambiguous answer, the index hint is never used to choose
 */
(function () {
  "use strict";
  var VERSION = "4";
  if (window.__remoteDispatch && window.__remoteDispatch.version === VERSION) return;

  var INDEX = "data-rd-index";
  var SKIP = {SCRIPT: 1, STYLE: 1, NOSCRIPT: 1, TEMPLATE: 1, HEAD: 1, META: 1, LINK: 1, TITLE: 1};
  var ROLES = {button: 1, link: 1, checkbox: 1, radio: 1, tab: 1, menuitem: 1, menuitemcheckbox: 1,
    menuitemradio: 1, option: 1, "switch": 1, combobox: 1, textbox: 1, searchbox: 1, slider: 1,
    spinbutton: 1, listbox: 1, treeitem: 1};
  var ATTRS = ["id", "type", "name", "placeholder", "href", "role", "aria-label", "title", "alt", "aria-expanded"];
  var BLOCK = /^(block|flex|grid|list-item|table|table-row|table-caption|flow-root)$/;

  function top() { return document.documentElement; }
  function clean(s) { return (s || "").replace(/\s+/g, " ").trim(); }
  function cut(s, n) { s = clean(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
  function style(el) {
    try { return el.ownerDocument.defaultView.getComputedStyle(el); } catch (e) { return null; }
  }

  function visible(el) {
    if (!el || el.nodeType !== 1) return false;
    if (el.checkVisibility && !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
    var s = style(el);
    if (!s || s.display === "none" || s.visibility === "hidden" || s.visibility === "collapse") return false;
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) return true;
    // display: contents and zero-size wrappers of visible children
    return s.display === "contents" || el.getClientRects().length > 0 && el.children.length > 0;
  }

  function interactive(el) {
    var tag = el.tagName;
    if (tag === "A") return el.hasAttribute("href") || el.hasAttribute("onclick");
    if (tag === "BUTTON" || tag === "SELECT" || tag === "TEXTAREA" || tag === "SUMMARY") return true;
    if (tag === "INPUT") return (el.type || "").toLowerCase() !== "hidden";
    var role = (el.getAttribute("role") || "").toLowerCase();
    if (ROLES[role]) return true;
    if (el.getAttribute("draggable") === "true") return true;  // an HTML5 drag source: dragged by its number
    if (el.hasAttribute("onclick") || el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable))
      return true;
    var tab = el.getAttribute("tabindex");
    if (tab !== null && +tab >= 0 && tag !== "BODY" && tag !== "HTML") return true;
    // Handlers added with addEventListener cannot be seen from here: a pointer cursor that starts on
    // this element (not inherited from its parent) is the page saying "this is clickable".
    if (tag === "LABEL" || tag === "BODY" || tag === "HTML") return false;
    var s = style(el), p = el.parentElement && style(el.parentElement);
    return !!(s && s.cursor === "pointer" && !(p && p.cursor === "pointer"));
  }

  function labelsOf(el) {
    var out = [];
    try {
      if (el.labels) for (var i = 0; i < el.labels.length; i++) out.push(clean(el.labels[i].innerText));
    } catch (e) { /* not labelable */ }
    var by = el.getAttribute("aria-labelledby");
    if (by) by.split(/\s+/).forEach(function (id) {
      var t = el.ownerDocument.getElementById(id);
      if (t) out.push(clean(t.innerText || t.textContent));
    });
    return out.filter(Boolean);
  }

  function label(el) {
    var tag = el.tagName, aria = el.getAttribute("aria-label");
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") {
      var l = labelsOf(el);
      if (tag === "SELECT") {
        var o = el.options[el.selectedIndex];
        return cut((l[0] ? l[0] + ": " : "") + (o ? o.text : ""), 100);
      }
      var type = (el.type || "").toLowerCase();
      if (type === "submit" || type === "button" || type === "reset") return cut(el.value || aria || type, 100);
      return cut(aria || l[0] || el.placeholder || el.title || el.name || "", 100);
    }
    var text = clean(el.innerText || el.textContent);
    if (!text) {
      var img = el.querySelector && el.querySelector("img[alt]");
      text = aria || (img && img.alt) || el.title || "";
    }
    return cut(text || aria || "", 100);
  }

  function names(el) {
    // Everything a user might call this element by (case kept: an exact match is preferred).
    var out = [label(el), el.id, el.getAttribute("name"), el.getAttribute("placeholder"),
      el.getAttribute("aria-label"), el.getAttribute("title"), el.getAttribute("value")].concat(labelsOf(el));
    return out.filter(Boolean).map(clean);
  }

  // --- roots: the document, open shadow roots, same-origin iframes -------------------------------------
  function childDocument(frame) {
    try { return frame.contentDocument && frame.contentDocument.documentElement ? frame.contentDocument : null; }
    catch (e) { return null; }  // cross-origin
  }

  // `start` (default: this document) and every open shadow root and same-origin iframe's document in it; with
  // `ownDocument`, no iframe's: the roots whose elements WebDriver can switch into from this document.
  function roots(start, ownDocument) {
    var out = [], seen = [];
    (function add(root) {
      if (seen.indexOf(root) >= 0) return;
      seen.push(root); out.push(root);
      var all = root.querySelectorAll("*");
      for (var i = 0; i < all.length; i++) {
        var el = all[i];
        if (el.shadowRoot) add(el.shadowRoot);
        if (!ownDocument && (el.tagName === "IFRAME" || el.tagName === "FRAME")) {
          var d = childDocument(el);
          if (d) add(d);
        }
      }
    })(start || document);
    return out;
  }

  // The frame element to switch into next on the way to the frame numbered `n` (one of read()'s `frames`):
  // [that frame, true] when it is in this document or its open shadow roots, else [the same-origin iframe that
  // holds it, false] (WebDriver enters frames one document at a time), or [null, false].
  function frameToward(n) {
    var selector = "[" + INDEX + '="' + Number(n) + '"]', own = roots(document, true), i, j;
    function holds(doc) {
      return roots(doc).some(function (root) { return root.querySelector(selector); });
    }
    for (i = 0; i < own.length; i++) {
      var frame = own[i].querySelector(selector);
      if (frame) return [frame, true];
    }
    for (i = 0; i < own.length; i++) {
      var frames = own[i].querySelectorAll("iframe, frame");
      for (j = 0; j < frames.length; j++) {
        var d = childDocument(frames[j]);
        if (d && holds(d)) return [frames[j], false];
      }
    }
    return [null, false];
  }

  function all(selector) {
    var out = [], rs = roots();
    for (var i = 0; i < rs.length; i++) {
      var found = rs[i].querySelectorAll(selector);  // throws on an invalid selector
      for (var j = 0; j < found.length; j++) if (out.indexOf(found[j]) < 0) out.push(found[j]);
    }
    return out;
  }

  function reserve(next) {
    var mine = +(top().getAttribute("data-rd-next") || "1");
    if (next > mine) top().setAttribute("data-rd-next", String(mine = next));
    return mine;
  }

  function stamp(el) {
    var n = el.getAttribute(INDEX);
    if (n) return {index: +n, fresh: false};
    var next = +(top().getAttribute("data-rd-next") || "1");
    el.setAttribute(INDEX, String(next));
    top().setAttribute("data-rd-next", String(next + 1));
    return {index: next, fresh: true};
  }

  // --- reading ---------------------------------------------------------------------------------------
  function read(options) {
    var maxChars = (options && options.maxChars) || 40000;
    var firstReading = !top().hasAttribute("data-rd-read");
    var out = [], elements = [], frames = [], size = 0, full = false, above = false;
    if (options && options.next) reserve(options.next);
    var scrolled = (window.scrollY || 0) > 0;

    // The walk stops once the view is over budget: a huge page costs no more than a small one.
    function emit(s) { out.push(s); size += s.length; if (size > maxChars) full = true; }
    function newline() { if (out.length && out[out.length - 1] !== "\n") out.push("\n"); }

    function describe(el, frame) {
      var st = stamp(el), tag = el.tagName.toLowerCase(), isNew = st.fresh && !firstReading;
      var item = {index: st.index, tag: tag, label: label(el), "new": isNew};
      var attrs = "";
      ATTRS.forEach(function (a) {
        var v = el.getAttribute(a);
        if (v === null || v === "") return;
        if (a === "href") v = cut(v, 120);
        attrs += " " + a + '="' + cut(v, 80).replace(/"/g, "'") + '"';
        if (a === "type" || a === "role" || a === "name" || a === "href") item[a] = v;
      });
      if ((tag === "input" || tag === "textarea") && el.type !== "password" && el.value &&
          ["checkbox", "radio", "submit", "button", "reset"].indexOf(el.type) < 0)
        attrs += ' value="' + cut(el.value, 80).replace(/"/g, "'") + '"';
      if (el.type === "checkbox" || el.type === "radio") attrs += el.checked ? " checked" : "";
      if (el.disabled) attrs += " disabled";
      if (tag === "select") {
        var opts = [];
        for (var i = 0; i < el.options.length && i < 30; i++) opts.push(cut(el.options[i].text, 40));
        attrs += ' options="' + opts.join(" | ").replace(/"/g, "'") + '"';
      }
      if (chooser(el) && el.getAttribute("aria-expanded") === "true") {
        var shown = optionsOf(el).map(function (o) { return cut(o.innerText || o.textContent, 40); });
        if (shown.length) attrs += ' options="' + shown.slice(0, 30).join(" | ").replace(/"/g, "'") + '"';
      }
      if (frame) item.frame = frame;
      elements.push(item);
      newline();
      emit((isNew ? "*" : "") + "[" + st.index + "]<" + tag + attrs + ">" + item.label + "</" + tag + ">");
      newline();
    }

    function walk(node, frame, insideInteractive) {
      if (full) return;
      if (node.nodeType === 3) {
        if (!insideInteractive) {
          var t = clean(node.nodeValue);
          if (t) emit(t + " ");
        }
        return;
      }
      if (node.nodeType !== 1 && node.nodeType !== 11) return;
      if (node.nodeType === 1) {
        if (SKIP[node.tagName]) return;
        var s = style(node);
        if (!s || s.display === "none" || s.visibility === "hidden") {
          // a hidden parent may still have visible children (visibility can be overridden)
          if (!s || s.display === "none") return;
        }
        var block = s && BLOCK.test(s.display);
        // Scrolled down: what lies wholly above the viewport is left out (the marker says so).
        if (scrolled && block && node !== document.body && s.position !== "fixed" && s.position !== "sticky" &&
            node.getBoundingClientRect().bottom < 0) { above = true; return; }
        if (s && s.display === "table-cell" && node.previousElementSibling) emit("| ");
        if (block) newline();
        var here = insideInteractive;
        if (interactive(node) && visible(node)) { describe(node, frame); here = true; }
        if (node.tagName === "IFRAME" || node.tagName === "FRAME") {
          var d = childDocument(node), src = node.getAttribute("src") || node.name || "";
          if (d && d.body) {
            newline(); emit("(frame " + cut(src, 80) + ")"); newline();
            walk(d.body, (frame ? frame + " > " : "") + (src || "iframe"), false);
            newline();
          } else if (!d && visible(node)) {  // another origin: the driver reads it there
            var n = stamp(node).index;
            frames.push({index: n, src: node.src || src, frame: frame});
            newline(); emit("(frame " + n + ": " + cut(node.src || src, 80) + ")"); newline();
            emit("\u0001frame " + n + "\u0001"); newline();
          }
          return;
        }
        if (node.tagName === "IMG" && !here && node.alt && visible(node)) emit("[image: " + cut(node.alt, 80) + "] ");
        if (node.tagName === "BR") newline();
        var kids = node.shadowRoot ? node.shadowRoot.childNodes
          : node.tagName === "SLOT" ? node.assignedNodes({flatten: true}) : node.childNodes;
        if (node.tagName === "SLOT" && !kids.length) kids = node.childNodes;
        for (var i = 0; i < kids.length; i++) walk(kids[i], frame, here);
        if (block) newline();
        return;
      }
      for (var j = 0; j < node.childNodes.length; j++) walk(node.childNodes[j], frame, insideInteractive);
    }

    walk(document.body || document.documentElement, "", false);
    top().setAttribute("data-rd-read", "1");
    var text = out.join("").replace(/[ \t]+\n/g, "\n").replace(/\n{3,}/g, "\n\n").trim();
    var truncated = full || text.length > maxChars;
    if (truncated) {
      var end = text.lastIndexOf("\n", maxChars);  // whole lines only: never an element cut in half
      text = text.slice(0, end > 0 ? end : maxChars);
      var total = document.querySelectorAll(
        "a[href],button,input:not([type=hidden]),select,textarea,[role],[onclick]").length;
      var shown = text.split("[").length - 1, more = Math.max(0, total - shown);
      text += "\n… view cut at " + maxChars + " characters: " + (more ? "about " + more + " more elements and " : "") +
        "more text below. Scroll down, or extract with a CSS selector, to see the rest.";
    }
    if (above) text = "(scrolled: the content above is not shown; scroll up to see it)\n" + text;
    return {url: location.href, title: document.title, text: text, elements: elements, truncated: truncated,
            status: pageStatus(), frames: frames, next: reserve(0)};
  }

  // The main document's HTTP status (0: unknown, e.g. data: URLs); -1 for the browser's own error page.
  function pageStatus() {
    if (location.protocol === "chrome-error:") return -1;
    try {
      var nav = performance.getEntriesByType("navigation")[0];
      return (nav && nav.responseStatus) || 0;
    } catch (e) { return 0; }
  }

  // --- finding ---------------------------------------------------------------------------------------
  function candidates() {
    var out = [], els = all("*");
    for (var i = 0; i < els.length; i++) if (interactive(els[i]) && visible(els[i])) out.push(els[i]);
    return out;
  }

  function isSelector(text) {
    try { document.createDocumentFragment().querySelector(text); return true; } catch (e) { return false; }
  }

  function innermost(els) {
    // Nested matches (a clickable card and its button) are one thing to the user: keep the innermost.
    return els.filter(function (el) {
      return !els.some(function (other) { return other !== el && el.contains(other); });
    });
  }

  function ambiguous(t, els) {
    var listed = els.slice(0, 5).map(function (el) {
      return "[" + stamp(el).index + "] <" + el.tagName.toLowerCase() + "> " + label(el);
    });
    var e = new Error("Several elements match " + JSON.stringify(t) + ": " + listed.join(", ") +
      (els.length > 5 ? " and " + (els.length - 5) + " more" : "") + ". Use the element number.");
    e.ambiguous = true;
    throw e;
  }

  function find(target) {
    if (target === null || target === undefined) return null;
    var t = String(target).trim(), m = /^\[?(\d+)\]?$/.exec(t);
    if (m) {
      var byIndex = all("[" + INDEX + '="' + m[1] + '"]');
      return byIndex[0] || null;
    }
    var found = matching(t);
    if (found.hits.length > 1) ambiguous(t, found.hits);
    return found.hits[0] || null;
  }

  // What a text or selector names, by the first of these kinds of match that has any: {kind (0 the strongest),
  // hits (several: ambiguous)}. The driver compares kinds across documents of other origins.
  function matching(t) {
    var exact = clean(t), want = exact.toLowerCase(), cands = candidates();
    var lower = function (el) { return names(el).map(function (n) { return n.toLowerCase(); }); };
    var kinds = [
      // Exact (case-sensitive) before case-insensitive: "Eget" is not "eget".
      function () { return innermost(cands.filter(function (el) { return names(el).indexOf(exact) >= 0; })); },
      function () { return innermost(cands.filter(function (el) { return lower(el).indexOf(want) >= 0; })); },
      function () {
        if (!isSelector(t)) return [];
        var matched = all(t), shown = matched.filter(visible);
        return (shown.length ? shown : matched).slice(0, 1);
      },
      function () {
        return innermost(cands.filter(function (el) {
          return names(el).some(function (n) { return n.indexOf(exact) >= 0; });
        }));
      },
      function () {
        return innermost(cands.filter(function (el) {
          return lower(el).some(function (n) { return n.indexOf(want) >= 0; });
        }));
      },
      function () { var el = smallestWithText(exact, want); return el ? [el] : []; }
    ];
    for (var k = 0; k < kinds.length; k++) {
      var hits = kinds[k]();
      if (hits.length) return {kind: k, hits: hits};
    }
    return {kind: kinds.length, hits: []};
  }

  // The smallest visible element whose text contains it (deepest match wins), exact case first.
  function smallestWithText(exact, want) {
    var best = null, bestExact = false, els = all("body *");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (SKIP[el.tagName] || !visible(el)) continue;
      var text = clean(el.innerText), isExact = text.indexOf(exact) >= 0;
      if (!isExact && text.toLowerCase().indexOf(want) < 0) continue;
      if (!best || (isExact && !bestExact) || (isExact === bestExact &&
          (best.contains(el) || text.length < clean(best.innerText).length))) {
        best = el; bestExact = isExact;
      }
    }
    return best;
  }

  function rank(target) {
    var found = matching(String(target).trim());
    return {ok: true, kind: found.kind, count: found.hits.length, matches: found.hits.slice(0, 5).map(function (el) {
      return {index: stamp(el).index, tag: el.tagName.toLowerCase(), label: label(el)};
    })};
  }

  function notFound(target) {
    var t = String(target).trim();
    return {ok: false, error: /^\[?\d+\]?$/.test(t)
      ? "No element [" + t.replace(/[\[\]]/g, "") + "] on this page (read the page again: numbers belong to one page)."
      : "No element matching " + JSON.stringify(t) + " on this page."};
  }

  function info(el) {
    var st = stamp(el);
    var r = {ok: true, index: st.index, tag: el.tagName.toLowerCase(), label: label(el),
      inTop: el.ownerDocument === document && el.getRootNode() === document};
    if (el.tagName === "A" && el.href) r.href = el.href;
    ["id", "name", "type", "role", "aria-label", "placeholder"].forEach(function (a) {
      var v = el.getAttribute(a);
      if (v) r[a] = v;
    });
    var link = el.closest && el.closest("a[target], form[target]");
    if (link && !/^(_self|_top|_parent|)$/i.test(link.getAttribute("target"))) r.opensTab = true;
    return r;
  }

  function withElement(target, fn) {
    var el;
    try { el = find(target); } catch (e) { if (e.ambiguous) return {ok: false, error: e.message}; throw e; }
    if (!el) return notFound(target);
    try { return fn(el) || info(el); } catch (e) { return {ok: false, error: String(e && e.message || e)}; }
  }

  function mouse(el, types) {
    var r = el.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
    var View = el.ownerDocument.defaultView;
    types.forEach(function (type) {
      var Ctor = type.indexOf("pointer") === 0 && View.PointerEvent ? View.PointerEvent : View.MouseEvent;
      el.dispatchEvent(new Ctor(type, {bubbles: type !== "mouseenter", cancelable: true, composed: true,
        clientX: x, clientY: y, view: View}));
    });
  }

  function reveal(el) {
    try { el.scrollIntoView({block: "center", inline: "center"}); } catch (e) { el.scrollIntoView(); }
  }

  function setValue(el, value) {
    // The prototype's setter, so frameworks that track the value (React) see the change.
    var proto = el.tagName === "TEXTAREA" ? el.ownerDocument.defaultView.HTMLTextAreaElement.prototype
      : el.tagName === "SELECT" ? el.ownerDocument.defaultView.HTMLSelectElement.prototype
      : el.ownerDocument.defaultView.HTMLInputElement.prototype;
    var desc = Object.getOwnPropertyDescriptor(proto, "value");
    if (desc && desc.set) desc.set.call(el, value); else el.value = value;
  }

  function fire(el, type) { el.dispatchEvent(new Event(type, {bubbles: true, composed: true})); }

  // --- custom drop-downs: ARIA comboboxes and listboxes -------------------------------------------------
  var PAST = 6;  // pixels a drag onto an element goes past its centre (at most a quarter of its size)
  var CHOOSER = '[role=combobox],[role=listbox],[aria-haspopup=listbox]';

  function chooser(el) { return !!(el.matches && el.matches(CHOOSER)); }

  function byIds(el, attr) {
    var root = el.getRootNode ? el.getRootNode() : el.ownerDocument, out = [];
    (el.getAttribute(attr) || "").split(/\s+/).forEach(function (id) {
      var found = id && (root.getElementById ? root.getElementById(id) : el.ownerDocument.getElementById(id));
      if (found) out.push(found);
    });
    return out;
  }

  // The visible options of a combobox or listbox: its own, those of the popup it controls or owns, else (a popup
  // rendered elsewhere in the document, as many libraries do) every visible option of its document.
  function optionsOf(el) {
    var places = [el].concat(byIds(el, "aria-controls"), byIds(el, "aria-owns")), out = [];
    places.forEach(function (place) {
      var found = place.querySelectorAll("[role=option]");
      for (var i = 0; i < found.length; i++) if (visible(found[i]) && out.indexOf(found[i]) < 0) out.push(found[i]);
    });
    if (out.length || el.getAttribute("aria-expanded") !== "true") return out;
    var any = el.ownerDocument.querySelectorAll("[role=option]");
    for (var j = 0; j < any.length; j++) if (visible(any[j])) out.push(any[j]);
    return out;
  }

  function optionText(o) { return clean(o.innerText || o.textContent || o.getAttribute("aria-label")); }

  function pickOption(opts, option) {
    var want = clean(option).toLowerCase(), texts = opts.map(optionText), i;
    for (i = 0; i < opts.length; i++) if (texts[i].toLowerCase() === want) return i;
    for (i = 0; i < opts.length; i++) if (texts[i].toLowerCase().indexOf(want) >= 0) return i;
    return -1;
  }

  function press(el) {
    reveal(el);
    mouse(el, ["pointerover", "mouseover", "pointerdown", "mousedown"]);
    if (el.focus) el.focus();
    mouse(el, ["pointerup", "mouseup"]);
    if (typeof el.click === "function") el.click(); else mouse(el, ["click"]);
  }

  function choose(el, option, open) {
    var opts = optionsOf(el);
    if (!opts.length) {
      if (open) press(el);
      return {ok: true, pending: true};
    }
    var pick = pickOption(opts, option);
    if (pick < 0) return {ok: false, error: "No option " + JSON.stringify(String(option)) + " in [" + stamp(el).index +
      "] (options: " + opts.map(optionText).slice(0, 30).join(", ") + ")."};
    var text = optionText(opts[pick]);
    press(opts[pick]);
    var r = info(el);
    r.selected = text;
    r.widget = true;
    return r;
  }

  function shows(el, text) {
    var want = clean(text).toLowerCase();
    if (el.getAttribute("role") === "listbox") {
      var chosen = el.querySelectorAll("[aria-selected=true],[aria-checked=true]");
      for (var i = 0; i < chosen.length; i++) if (optionText(chosen[i]).toLowerCase().indexOf(want) >= 0) return true;
      return false;
    }
    var seen = [el.value, el.innerText, el.textContent, el.getAttribute("aria-valuetext")].concat(
      byIds(el, "aria-labelledby").map(function (l) { return l.innerText; }));
    return seen.some(function (s) { return typeof s === "string" && clean(s).toLowerCase().indexOf(want) >= 0; });
  }

  // --- drag and drop -------------------------------------------------------------------------------------
  function centre(el) {
    var b = el.getBoundingClientRect();
    return {x: b.left + b.width / 2, y: b.top + b.height / 2};
  }

  // The target's centre, a little past it the way the drag goes: a sortable list swaps two items once the pointer
  // crosses the middle of the one it moves onto, not at the middle itself.
  function past(from, onto) {
    var b = onto.getBoundingClientRect(), c = centre(onto);
    var step = function (d, size) { return d ? Math.sign(d) * Math.min(size / 4, PAST) : 0; };
    return {x: c.x + step(c.x - from.x, b.width), y: c.y + step(c.y - from.y, b.height)};
  }

  function inView(point, el) {
    var View = el.ownerDocument.defaultView;
    return point.x >= 0 && point.y >= 0 && point.x < View.innerWidth && point.y < View.innerHeight;
  }

  function html5(el) {
    var d = el.closest && el.closest("[draggable=true],[ondragstart]");
    return d || null;
  }

  function dragEvent(el, type, point, data) {
    var View = el.ownerDocument.defaultView;
    var e = new View.DragEvent(type, {bubbles: true, cancelable: type !== "dragend" && type !== "dragleave", composed: true, clientX: point.x, clientY: point.y, view: View, dataTransfer: data});
    return el.dispatchEvent(e);  // false: a listener cancelled it
  }

  // HTML5 drag-and-drop as Chromium fires it for a person (WebDriver's pointer actions fire none of it).
  function dropHtml5(el, onto, from, to) {
    var View = el.ownerDocument.defaultView, data = new View.DataTransfer();
    mouse(el, ["pointerdown", "mousedown"]);
    if (!dragEvent(el, "dragstart", from, data))
      return {ok: false, error: "The page did not let [" + stamp(el).index + "] be dragged (dragstart cancelled)."};
    dragEvent(el, "drag", from, data);
    dragEvent(onto, "dragenter", to, data);
    var accepted = !dragEvent(onto, "dragover", to, data);
    if (accepted) {
      data.dropEffect = data.effectAllowed === "copy" ? "copy" : "move";
      dragEvent(onto, "drop", to, data);
    } else {
      dragEvent(onto, "dragleave", to, data);
    }
    dragEvent(el, "dragend", to, data);
    return {accepted: accepted};
  }

  function drag(source, target, offset) {
    var el, onto = null;
    try {
      el = find(source);
      if (!el) return notFound(source);
      if (target !== null && target !== undefined && target !== "") {
        onto = find(target);
        if (!onto) return notFound(target);
        if (onto.ownerDocument !== el.ownerDocument)
          return {ok: false, error: "[" + stamp(el).index + "] and [" + stamp(onto).index + "] are in different " +
            "documents (frames): an element is dragged within its own page."};
      }
    } catch (e) { if (e.ambiguous) return {ok: false, error: e.message}; throw e; }
    reveal(el);
    var from = centre(el), to;
    if (onto) {
      if (!inView(centre(onto), onto)) onto.scrollIntoView({block: "nearest", inline: "nearest"});  // both in view
      from = centre(el);
      to = past(from, onto);
    } else {
      to = {x: from.x + (+(offset && offset.x) || 0), y: from.y + (+(offset && offset.y) || 0)};
    }
    var r = {ok: true, from: from, to: to, source: info(el), target: onto ? info(onto) : null};
    var dragged = html5(el);
    r.html5 = !!dragged;
    if (dragged) {
      var drop = onto || el.ownerDocument.elementFromPoint(to.x, to.y) || el.ownerDocument.body;
      var done = dropHtml5(dragged, drop, from, to);
      if (done.ok === false) return done;
      r.accepted = done.accepted;
    }
    return r;
  }

  // --- replay locators ------------------------------------------------------------------------------
  var STABLE = ["id", "name", "type", "href", "placeholder"];

  function roleOf(el) {
    var role = (el.getAttribute("role") || "").toLowerCase();
    if (role) return role;
    var tag = el.tagName, type = (el.type || "").toLowerCase();
    if (tag === "A") return "link";
    if (tag === "BUTTON" || tag === "INPUT" && /^(submit|button|reset|image)$/.test(type)) return "button";
    if (tag === "SELECT") return "combobox";
    if (tag === "TEXTAREA" || tag === "INPUT" && /^(|text|email|password|search|tel|url|number)$/.test(type))
      return "textbox";
    if (tag === "INPUT") return type;
    return tag.toLowerCase();
  }

  function cssPath(el) {
    var parts = [];
    while (el && el.nodeType === 1 && el.tagName !== "HTML") {
      var tag = el.tagName.toLowerCase(), parent = el.parentElement, n = 1, same = 0;
      if (parent) for (var c = parent.firstElementChild; c; c = c.nextElementSibling) {
        if (c.tagName === el.tagName) { same++; if (c === el) n = same; }
      }
      parts.unshift(same > 1 ? tag + ":nth-of-type(" + n + ")" : tag);
      el = parent;
    }
    return parts.join(" > ");
  }

  function dataAttrs(el) {
    var out = {};
    for (var i = 0; i < el.attributes.length; i++) {
      var a = el.attributes[i];
      if (a.name.indexOf("data-") === 0 && a.name !== INDEX && a.name.indexOf("data-rd-") !== 0) out[a.name] = a.value;
    }
    return out;
  }

  function locator(el) {
    var attrs = dataAttrs(el);
    STABLE.forEach(function (a) { var v = el.getAttribute(a); if (v) attrs[a] = v; });
    var ls = labelsOf(el);
    return {ok: true, index: stamp(el).index, tag: el.tagName.toLowerCase(), role: roleOf(el),
      name: label(el), text: cut(el.innerText || "", 100), label: ls[0] || "", attrs: attrs, css: cssPath(el),
      url: location.href, title: document.title};
  }

  function resolve(loc) {
    var r = match(loc || {});
    r.url = location.href;
    r.title = document.title;
    return r;
  }

  function match(loc) {
    var attrs = loc.attrs || {}, lower = function (s) { return clean(s).toLowerCase(); };
    var pool = candidates().filter(function (el) {
      return el.tagName.toLowerCase() === loc.tag && (!loc.role || roleOf(el) === loc.role);
    });
    function attrKey(name) {
      return function (el) { return attrs[name] !== undefined && el.getAttribute(name) === attrs[name]; };
    }
    // Strong keys first; a key that matches nothing (the id changed) is skipped, one that matches several
    // is narrowed by the other strong keys and otherwise reported as ambiguous.
    var keys = [["id", attrKey("id")]];
    Object.keys(attrs).forEach(function (a) { if (a.indexOf("data-") === 0) keys.push([a, attrKey(a)]); });
    keys.push(["name attribute", attrKey("name")]);
    keys.push(["role and name", function (el) { return !!loc.name && lower(label(el)) === lower(loc.name); }]);
    keys.push(["label", function (el) { return !!loc.label && labelsOf(el).map(lower).indexOf(lower(loc.label)) >= 0; }]);
    keys.push(["text", function (el) { return !!loc.text && lower(el.innerText) === lower(loc.text); }]);
    keys.push(["href", attrKey("href")]);
    keys.push(["placeholder", attrKey("placeholder")]);
    function brief(els) {
      return els.slice(0, 10).map(function (el) { return {index: stamp(el).index, tag: el.tagName.toLowerCase(), name: label(el)}; });
    }
    for (var i = 0; i < keys.length; i++) {
      var hit = pool.filter(keys[i][1]);
      if (!hit.length) continue;
      for (var j = 0; j < keys.length && hit.length > 1; j++) {
        if (j === i) continue;
        var narrower = hit.filter(keys[j][1]);
        if (narrower.length) hit = narrower;
      }
      var by = keys[i][0];
      // Still several (the recorded page too had two "No" buttons): the one at the recorded place, if exactly
      // one is there. Twins that both fit the recorded path (it had no position: the element had no
      // same-tag sibling then) stay ambiguous.
      if (hit.length > 1 && loc.css) {
        var placed;
        try { placed = all(loc.css); } catch (e) { placed = []; }
        var there = hit.filter(function (el) { return placed.indexOf(el) >= 0; });
        if (there.length === 1) { hit = there; by += " and place"; }
      }
      var r = {ok: true, count: hit.length, matches: brief(hit), by: by};
      if (hit.length === 1) r.index = stamp(hit[0]).index;
      return r;
    }
    // A path alone is a guess once the element had a name: only a nameless element (an icon) is found by it.
    if (loc.css && !loc.name && !loc.text) {
      var byPath;
      try { byPath = all(loc.css).filter(function (el) { return el.tagName.toLowerCase() === loc.tag && visible(el); }); }
      catch (e) { byPath = []; }
      if (byPath.length) {
        var p = {ok: true, count: byPath.length, matches: brief(byPath), by: "css path"};
        if (byPath.length === 1) p.index = stamp(byPath[0]).index;
        return p;
      }
    }
    return {ok: true, count: 0, matches: [], by: ""};
  }

  var api = {
    version: VERSION,
    read: read,
    element: function (target) { try { return find(target); } catch (e) { return null; } },
    locate: function (target) { return withElement(target, function () { return null; }); },
    click: function (target) {
      return withElement(target, function (el) {
        reveal(el);
        mouse(el, ["pointerover", "mouseover", "pointerdown", "mousedown"]);
        if (el.focus) el.focus();
        mouse(el, ["pointerup", "mouseup"]);
        if (typeof el.click === "function") el.click();
        else mouse(el, ["click"]);  // an SVG shape has no click(): the event a pointer would fire
        return null;
      });
    },
    focus: function (target) {
      return withElement(target, function (el) { reveal(el); if (el.focus) el.focus(); return null; });
    },
    type: function (target, text, options) {
      var clear = !(options && options.clear === false);
      return withElement(target, function (el) {
        reveal(el);
        if (el.focus) el.focus();
        if (el.isContentEditable) {
          el.textContent = (clear ? "" : el.textContent) + text;
          fire(el, "input");
          return null;
        }
        if (!("value" in el) || el.tagName === "SELECT" || el.tagName === "BUTTON")
          return {ok: false, error: "The element [" + stamp(el).index + "] <" + el.tagName.toLowerCase() +
            "> does not take text."};
        setValue(el, (clear ? "" : el.value) + text);
        fire(el, "input");
        fire(el, "change");
        return null;
      });
    },
    select: function (target, option, options) {
      return withElement(target, function (el) {
        if (el.tagName !== "SELECT") {
          var inner = el.querySelector && el.querySelector("select");
          var widget = !inner && (chooser(el) ? el : el.querySelector && el.querySelector(CHOOSER));
          if (widget) return choose(widget, option, !!(options && options.open));
          if (!inner) return {ok: false, error: "The element [" + stamp(el).index + "] <" +
            el.tagName.toLowerCase() + "> is neither a <select> nor a combobox or listbox."};
          el = inner;
        }
        var want = clean(option).toLowerCase(), pick = -1, i, texts = [];
        for (i = 0; i < el.options.length; i++) {
          var o = el.options[i];
          texts.push(clean(o.text));
          if (pick < 0 && (o.value === option || clean(o.text).toLowerCase() === want)) pick = i;
        }
        for (i = 0; pick < 0 && i < el.options.length; i++)
          if (clean(el.options[i].text).toLowerCase().indexOf(want) >= 0) pick = i;
        if (pick < 0) return {ok: false, error: "No option " + JSON.stringify(String(option)) + " in [" +
          stamp(el).index + "] (options: " + texts.join(", ") + ")."};
        reveal(el);
        el.selectedIndex = pick;
        fire(el, "input");
        fire(el, "change");
        var r = info(el);
        r.selected = texts[pick];
        return r;
      });
    },
    shows: function (target, text) {
      var el;
      try { el = find(target); } catch (e) { return false; }
      if (el && !chooser(el) && el.tagName !== "SELECT") el = el.querySelector(CHOOSER) || el;
      return !!el && shows(el, text);
    },
    drag: drag,
    reserve: reserve,
    scroll: function (direction, target) {
      direction = (direction || "down").toLowerCase();
      var el = null;
      if (target !== undefined && target !== null && target !== "") {
        try { el = find(target); } catch (e) { return {ok: false, error: String(e && e.message || e)}; }
        if (!el) return notFound(target);
      }
      var box = el || document.scrollingElement || document.documentElement;
      var page = el ? el.clientHeight : window.innerHeight, step = Math.max(100, Math.round(page * 0.8));
      var before = box.scrollTop;
      if (direction === "top") box.scrollTop = 0;
      else if (direction === "bottom") box.scrollTop = box.scrollHeight;
      else box.scrollTop = before + (direction === "up" ? -step : step);
      var atEnd = direction === "up" || direction === "top" ? box.scrollTop <= 0
        : box.scrollTop + (el ? el.clientHeight : window.innerHeight) >= box.scrollHeight - 2;
      return {ok: true, scrollY: Math.round(box.scrollTop), moved: Math.round(box.scrollTop - before), atEnd: atEnd};
    },
    hover: function (target) {
      return withElement(target, function (el) {
        reveal(el);
        mouse(el, ["pointerover", "pointerenter", "mouseover", "mouseenter", "pointermove", "mousemove"]);
        return null;
      });
    },
    extract: function (selector) {
      var found;
      try { found = all(selector); } catch (e) {
        return {ok: false, error: "Invalid CSS selector " + JSON.stringify(String(selector)) + "."};
      }
      return {ok: true, texts: found.map(function (el) {
        return clean(visible(el) ? el.innerText : el.textContent);
      })};
    },
    hasText: function (text) {
      var want = clean(text).toLowerCase(), rs = roots();
      for (var i = 0; i < rs.length; i++) {
        var body = rs[i].body || rs[i];
        var seen = body.innerText !== undefined ? body.innerText : body.textContent;
        if (clean(seen).toLowerCase().indexOf(want) >= 0) return true;
      }
      return false;
    },
    hasElement: function (selector) {
      try { return all(selector).length > 0; } catch (e) { return false; }
    },
    html: function () { return document.documentElement.outerHTML; },
    readyState: function () { return document.readyState; },
    // The SDK's deterministic selectors (agentic_selector, wait_for_element): every given kind must hold.
    // {id, dataTestId, name, ariaLabel, role, type, tagName, className, textContent, xpath, domPath: {value}}
    // -> {ok, count, visible, index, tag, label, text} of the first (visible first) element matching all of them.
    match: function (selectors) {
      var v = function (k) { return selectors && selectors[k] && selectors[k].value !== undefined
        ? String(selectors[k].value) : null; };
      var q = function (s) { return '"' + s.replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"'; };
      var css = "", attr = {dataTestId: "data-testid", name: "name", ariaLabel: "aria-label", role: "role",
        type: "type"};
      if (v("tagName")) css += v("tagName").toLowerCase().replace(/[^a-z0-9-]/g, "");
      if (v("id")) css += "[id=" + q(v("id")) + "]";
      Object.keys(attr).forEach(function (k) { if (v(k)) css += "[" + attr[k] + "=" + q(v(k)) + "]"; });
      if (v("className")) v("className").split(/\s+/).filter(Boolean).forEach(function (c) {
        css += "[class~=" + q(c) + "]";
      });
      var found;
      try {
        if (v("domPath")) found = all(v("domPath"));
        else found = all(css || "*");
        if (css && v("domPath")) found = found.filter(function (el) { return el.matches(css); });
        if (v("xpath")) {
          var hits = [], x = document.evaluate(v("xpath"), document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null);
          for (var i = 0; i < x.snapshotLength; i++) if (x.snapshotItem(i).nodeType === 1) hits.push(x.snapshotItem(i));
          found = (css || v("domPath")) ? found.filter(function (el) { return hits.indexOf(el) >= 0; }) : hits;
        }
      } catch (e) {
        return {ok: false, error: "Invalid selector: " + String(e && e.message || e)};
      }
      if (v("textContent")) {
        var want = clean(v("textContent")).toLowerCase();
        found = found.filter(function (el) { return clean(el.textContent).toLowerCase() === want; });
        if (!found.length && !css && !v("xpath") && !v("domPath")) {
          var el = null;
          try { el = find(v("textContent")); } catch (e) { /* ambiguous: no single element */ }
          if (el) found = [el];
        }
      }
      var shown = found.filter(visible), el0 = shown[0] || found[0];
      if (!el0) return {ok: true, count: 0, visible: false};
      var r = info(el0);
      r.count = found.length;
      r.visible = visible(el0);
      r.text = clean(visible(el0) ? el0.innerText : el0.textContent);
      return r;
    },
    describe: function (target) { return withElement(target, locator); },
    center: function (target) {
      return withElement(target, function (el) {
        try { el.scrollIntoView({block: "center", inline: "center"}); } catch (e) { el.scrollIntoView(); }
        var b = el.getBoundingClientRect(), r = info(el);
        r.x = b.left + b.width / 2;
        r.y = b.top + b.height / 2;
        return r;
      });
    },
    resolve: resolve,
    rank: rank,
    frameToward: frameToward,
    property: function (target, name) {
      return withElement(target, function (el) {
        var value = el[name];
        if (value === undefined && el.hasAttribute(name)) value = el.getAttribute(name);
        var r = info(el);
        r.value = value === undefined || value === null ? null
          : typeof value === "object" ? JSON.stringify(value) : String(value);
        return r;
      });
    }
  };
  try {
    Object.defineProperty(window, "__remoteDispatch", {value: api, configurable: true, writable: true});
  } catch (e) {
    window.__remoteDispatch = api;
  }
})();
