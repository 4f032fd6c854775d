// Remote Dispatch extension service worker: registers this browser's windows with the configured service,
// long-polls it for their commands, runs them in the window's driven tab, and posts the results back.
//
// Safety: commands come only from the configured service URL (this worker fetches them; nothing listens
// for messages from pages or other extensions), only for windows this extension registered, and the page
// script (page.js, the one page-side script of workers/browser/) is injected only into the tab being driven.
"use strict";

const POLL_SECONDS = 20;          // below the ~30 s after which Chromium stops a worker awaiting a fetch
const UNREACHABLE_AFTER = 3;      // failed attempts in a row before "reconnecting" becomes "unreachable"
const LOAD_TIMEOUT_MS = 30000;
const DRAG_MOVES = 12;            // a pointer drag's moves between down and up (as the Selenium driver makes)
const CHOICE_MS = 5000;           // how long a custom drop-down may take to show its options, then the chosen one

// ---- settings and shared state (chrome.storage: local = settings + window ids, session = live state) ----
async function settings() {
  const s = await chrome.storage.local.get(["serviceUrl", "apiKey", "windows"]);
  return {serviceUrl: (s.serviceUrl || "").replace(/\/+$/, ""), apiKey: s.apiKey || "", windows: s.windows || {}};
}

async function sessionGet(name, fallback) {
  const s = await chrome.storage.session.get(name);
  return s[name] === undefined ? fallback : s[name];
}

async function sessionUpdate(name, fn, fallback = {}) {
  const value = fn(await sessionGet(name, fallback));
  await chrome.storage.session.set({[name]: value});
  return value;
}

async function setConnection(state, detail = "") {
  const now = new Date().toISOString();
  // Writing to chrome.storage also counts as activity: it keeps an idle worker from being stopped.
  await chrome.storage.session.set({connection: {state, detail, at: now}});
}

class ServiceError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const {serviceUrl, apiKey} = await settings();
  if (!serviceUrl || !apiKey) throw new ServiceError(0, {message: "not configured"});
  const response = await fetch(`${serviceUrl}/fast/v2${path}`, {
    method,
    headers: {"x-api-key": apiKey, "content-type": "application/json"},
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await response.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch (e) { parsed = {message: text.slice(0, 200)}; }
  if (!response.ok) throw new ServiceError(response.status, parsed);
  return parsed;
}

// ---- windows: each normal window of this profile gets a browserWindowId owned by the API key --------
let registering = Promise.resolve();
function registeredWindows() {
  // One registration at a time: two loops must not register the same window twice.
  const next = registering.then(registerWindows);
  registering = next.catch(() => {});
  return next;
}

async function registerWindows() {
  const {windows} = await settings();
  const open = await chrome.windows.getAll({windowTypes: ["normal"]});
  const ids = new Set(open.map((w) => String(w.id)));
  let changed = false;
  for (const chromeId of Object.keys(windows)) {
    if (!ids.has(chromeId)) { delete windows[chromeId]; changed = true; }
  }
  for (const w of open) {
    if (!windows[String(w.id)]) {
      const made = await api("POST", "/browser-windows", {label: `Chrome window ${w.id}`});
      windows[String(w.id)] = made.browserWindowId;
      changed = true;
    }
  }
  if (changed) await chrome.storage.local.set({windows});
  return windows;
}

async function chromeWindowOf(browserWindowId) {
  const {windows} = await settings();
  for (const [chromeId, id] of Object.entries(windows)) if (id === browserWindowId) return Number(chromeId);
  return null;
}

// ---- the long poll ---------------------------------------------------------------------------------
let polling = false;
let generation = 0;  // bumped when the settings change: a running loop from older settings stops

async function pollLoop() {
  if (polling) return;
  polling = true;
  const mine = ++generation;
  let failures = 0;
  try {
    while (mine === generation) {
      const {serviceUrl, apiKey} = await settings();
      if (!serviceUrl || !apiKey) { await setConnection("not configured", "Set the service URL and API key in the options."); return; }
      try {
        if (failures) await setConnection(failures >= UNREACHABLE_AFTER ? "unreachable" : "reconnecting",
          `attempt ${failures + 1}`);
        const windows = await registeredWindows();
        const ids = Object.values(windows);
        if (!failures) await setConnection("connected", serviceUrl);
        await abandonInterrupted();
        const answer = await api("POST", "/browser-windows/poll",
          {browserWindowIds: ids, wait: ids.length ? POLL_SECONDS : 0, running: [...running]});
        failures = 0;
        await setConnection("connected", serviceUrl);
        if (answer.unknown.length) await forget(answer.unknown);
        for (const command of answer.commands) enqueue(command);
        if (!ids.length) await sleep(POLL_SECONDS * 1000);
      } catch (error) {
        if (error instanceof ServiceError && error.status === 401) {
          await setConnection("unauthorized", "The service refused the API key (401): check it in the options.");
          return;  // until the settings change
        }
        failures += 1;
        const why = error instanceof ServiceError ? `HTTP ${error.status}: ${error.message}`
          : `${String(error.message || error)} — ${serviceUrl} (is the service running, and the URL right?)`;
        await setConnection(failures >= UNREACHABLE_AFTER ? "unreachable" : "reconnecting", why);
        const retryAfter = error instanceof ServiceError && error.status === 429 ? 5 : Math.min(2 ** failures, 10);
        await sleep(retryAfter * 1000);
      }
    }
  } finally {
    polling = false;
  }
}

async function forget(browserWindowIds) {
  const {windows} = await settings();
  for (const [chromeId, id] of Object.entries(windows)) if (browserWindowIds.includes(id)) delete windows[chromeId];
  await chrome.storage.local.set({windows});
}

function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

// Commands of one window run one after another; windows run side by side.
const queues = new Map();
function enqueue(command) {
  if (running.has(command.commandId)) return;  // handed out again while queued or running here
  running.add(command.commandId);
  const previous = queues.get(command.browserWindowId) || Promise.resolve();
  const next = previous.then(() => execute(command));
  queues.set(command.browserWindowId, next.catch(() => {}));
}

// Commands this worker is executing. The service hands a command out again until its result is in (a poll's
// answer may be lost when Chromium stops the worker), so a command already started is never started twice;
// `started` in session storage survives a stopped worker, whose interrupted commands then end as errors.
const running = new Set();

async function abandonInterrupted() {
  const started = await sessionGet("started", []);
  const orphans = started.filter((id) => !running.has(id));
  for (const id of orphans) {
    await postResult(id, {status: "error", data: null,
      error: "The extension's service worker was stopped while it ran this command; it may not have completed."});
  }
  if (orphans.length) await sessionUpdate("started", (list) => list.filter((id) => !orphans.includes(id)), []);
}

async function postResult(commandId, result) {
  // The result is the command's only record of completion: keep trying through a short outage.
  for (let attempt = 0; attempt < 30; attempt++) {
    try {
      await api("POST", `/browser-windows/commands/${commandId}/result`, result);
      return true;
    } catch (error) {
      if (error instanceof ServiceError && error.status >= 400 && error.status < 500 && error.status !== 429) return false;
      await sleep(Math.min(1000 * (attempt + 1), 5000));
    }
  }
  return false;
}

async function execute(command) {
  await sessionUpdate("started", (list) => [...list, command.commandId], []);
  try {
    await executeOnce(command);
  } finally {
    running.delete(command.commandId);
    await sessionUpdate("started", (list) => list.filter((id) => id !== command.commandId), []);
  }
}

async function executeOnce(command) {
  let result, c = null;
  const chromeWindowId = await chromeWindowOf(command.browserWindowId);
  if (chromeWindowId === null) {
    result = {status: "error", error: "This window is not one of this extension's windows."};
  } else {
    c = {...command, chromeWindowId};
    try {
      const handler = COMMANDS[command.name];
      if (!handler) throw new Error(`Unknown command '${command.name}'.`);
      const outcome = await handler(c);
      result = outcome && outcome.__status ? {status: outcome.__status, data: outcome.data ?? null, error: outcome.error ?? null}
        : {status: "success", data: outcome === undefined ? null : outcome, error: null};
    } catch (error) {
      result = {status: "error", data: null, error: String(error && error.message || error)};
    }
  }
  await postResult(command.commandId, result);
  if (result.status === "success" && c && c.after) await c.after();
}

// ---- tabs: the driven tab of each window ------------------------------------------------------------
// tasks[browserWindowId] = {requestId, tabId, startedAt, prompt, closed?}: the task running in the window.
async function tasks() { return sessionGet("tasks", {}); }

async function drivenTab(command) {
  const all = await tasks();
  const task = command.requestId ? all[command.browserWindowId] : null;
  if (command.requestId && (!task || task.requestId !== command.requestId)) {
    return (await beginTask(command)).tabId;
  }
  if (task) {
    if (task.closed) throw new Error(task.closed);
    try {
      const tab = await chrome.tabs.get(task.tabId);
      if (tab.windowId !== command.chromeWindowId) throw new Error("moved");
      return tab.id;
    } catch (e) {
      throw new Error("The tab the task was working in was closed (or moved to another window) by the user.");
    }
  }
  const [active] = await chrome.tabs.query({windowId: command.chromeWindowId, active: true});
  if (!active) throw new Error("The window has no tab to act in.");
  return active.id;
}

async function setDriven(command, tabId) {
  if (!command.requestId) return;
  await sessionUpdate("tasks", (all) => {
    if (all[command.browserWindowId]) all[command.browserWindowId].tabId = tabId;
    return all;
  });
}

async function beginTask(command) {
  const [active] = await chrome.tabs.query({windowId: command.chromeWindowId, active: true});
  if (!active) throw new Error("The window has no tab to act in.");
  const task = {requestId: command.requestId, tabId: active.id, startedAt: new Date().toISOString(),
    prompt: (command.args && command.args.prompt) || ""};
  await sessionUpdate("tasks", (all) => ({...all, [command.browserWindowId]: task}));
  return task;
}

// A tab the driven tab opens (target=_blank, window.open) becomes the driven tab.
chrome.tabs.onCreated.addListener(async (tab) => {
  if (tab.openerTabId === undefined) return;
  await sessionUpdate("tasks", (all) => {
    for (const task of Object.values(all)) if (task.tabId === tab.openerTabId && !task.closed) task.tabId = tab.id;
    return all;
  });
});

chrome.tabs.onRemoved.addListener(async (tabId, info) => {
  await sessionUpdate("tasks", (all) => {
    for (const task of Object.values(all)) {
      if (task.tabId === tabId && !task.closing) {
        task.closed = info.isWindowClosing ? "The browser window the task was working in was closed by the user."
          : "The tab the task was working in was closed by the user.";
      }
    }
    return all;
  });
});

chrome.windows.onRemoved.addListener(async (chromeWindowId) => {
  const {windows} = await settings();
  const id = windows[String(chromeWindowId)];
  if (!id) return;
  delete windows[String(chromeWindowId)];
  await chrome.storage.local.set({windows});
  try { await api("DELETE", `/browser-windows/${id}`); } catch (e) { /* offline: it times out instead */ }
});

chrome.windows.onCreated.addListener(() => { generation++; polling = false; pollLoop(); });

function waitForLoad(tabId, timeoutMs = LOAD_TIMEOUT_MS) {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (fn, value) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      chrome.tabs.onUpdated.removeListener(listener);
      chrome.tabs.onRemoved.removeListener(removed);
      fn(value);
    };
    const listener = (id, change, tab) => { if (id === tabId && change.status === "complete") finish(resolve, tab); };
    const removed = (id) => { if (id === tabId) finish(reject, new Error("The tab was closed while its page loaded.")); };
    const timer = setTimeout(() => finish(reject, new Error(`The page did not finish loading within ${timeoutMs / 1000} s.`)), timeoutMs);
    chrome.tabs.onUpdated.addListener(listener);
    chrome.tabs.onRemoved.addListener(removed);
    chrome.tabs.get(tabId).then((tab) => { if (tab.status === "complete") finish(resolve, tab); },
      () => finish(reject, new Error("The tab is gone.")));
  });
}

async function settle(tabId) {
  // A click or key may start a navigation a moment later: give it that moment, then wait for the load.
  await sleep(150);
  const tab = await chrome.tabs.get(tabId);
  if (tab.status !== "complete") await waitForLoad(tabId);
}

function checkUrl(url) {
  let parsed;
  try { parsed = new URL(url); } catch (e) { throw new Error(`Not a URL: ${url}`); }
  if (!["http:", "https:"].includes(parsed.protocol)) throw new Error(`Only http(s) URLs can be opened, not ${parsed.protocol}`);
  return parsed.href;
}

// ---- the page script -------------------------------------------------------------------------------
async function page(tabId, method, ...args) {
  await chrome.scripting.executeScript({target: {tabId}, files: ["page.js"]});
  const [frame] = await chrome.scripting.executeScript({
    target: {tabId},
    func: (name, params) => window.__remoteDispatch[name](...params),
    args: [method, args],
  });
  if (!frame) throw new Error("The page could not be scripted.");
  return frame.result;
}

function ok(result) {
  if (result && result.ok === false) throw new Error(result.error);
  return result;
}

async function runInPage(tabId, code) {
  // Arbitrary code runs in the page's own world (under the page's CSP): an expression, or a function body.
  const [frame] = await chrome.scripting.executeScript({
    target: {tabId},
    world: "MAIN",
    func: async (source) => {
      let value;
      try {
        value = (0, eval)(source);
      } catch (error) {
        if (!(error instanceof SyntaxError)) return {error: String(error && error.message || error)};
        try { value = new Function(source)(); } catch (e) { return {error: String(e && e.message || e)}; }
      }
      try { value = await value; } catch (e) { return {error: String(e && e.message || e)}; }
      try { return {value: value === undefined ? null : JSON.parse(JSON.stringify(value))}; }
      catch (e) { return {value: String(value)}; }
    },
    args: [code],
  });
  if (!frame || !frame.result) throw new Error("The page could not be scripted.");
  if (frame.result.error) throw new Error(`JavaScript error: ${frame.result.error}`);
  return frame.result.value;
}

async function screenshot(tabId, chromeWindowId) {
  const tab = await chrome.tabs.get(tabId);
  if (!tab.active) await chrome.tabs.update(tabId, {active: true});
  for (let attempt = 0; ; attempt++) {
    try {
      const dataUrl = await chrome.tabs.captureVisibleTab(chromeWindowId, {format: "png"});
      return dataUrl.slice(dataUrl.indexOf(",") + 1);
    } catch (error) {
      // Chromium allows two captures a second (MAX_CAPTURE_VISIBLE_TAB_CALLS_PER_SECOND).
      if (attempt < 5 && /MAX_CAPTURE|quota/i.test(String(error.message))) { await sleep(600); continue; }
      throw error;
    }
  }
}

// Real (trusted) key presses go through the DevTools protocol: a page cannot tell them from the user's.
const KEYS = {Enter: [13, "\r"], Tab: [9, ""], Escape: [27, ""], Backspace: [8, ""], Delete: [46, ""],
  ArrowDown: [40, ""], ArrowUp: [38, ""], ArrowLeft: [37, ""], ArrowRight: [39, ""], Home: [36, ""], End: [35, ""],
  PageDown: [34, ""], PageUp: [33, ""], Space: [32, " "], " ": [32, " "]};
const MODIFIERS = {alt: 1, control: 2, ctrl: 2, meta: 4, command: 4, shift: 8};

function keyEvent(key, code, modifiers) {
  const known = KEYS[key];
  const text = known ? known[1] : key.length === 1 ? key : "";
  const vk = known ? known[0] : key.length === 1 ? key.toUpperCase().charCodeAt(0) : 0;
  const keyCode = code || (key.length === 1 && /[a-z]/i.test(key) ? `Key${key.toUpperCase()}`
    : key.length === 1 && /\d/.test(key) ? `Digit${key}` : key === " " ? "Space" : key);
  return {key: key === "Space" ? " " : key, code: keyCode, windowsVirtualKeyCode: vk, nativeVirtualKeyCode: vk,
    text: modifiers & 2 || modifiers & 4 ? "" : text, unmodifiedText: text, modifiers};
}

async function withDebugger(tabId, fn) {
  const target = {tabId};
  await chrome.debugger.attach(target, "1.3");
  try { return await fn((method, params) => chrome.debugger.sendCommand(target, method, params)); }
  finally { try { await chrome.debugger.detach(target); } catch (e) { /* already gone */ } }
}

// A real (trusted) click, right click or double click at a point of the viewport.
async function mouseAt(tabId, kind, x, y) {
  const button = kind === "rightClick" ? "right" : "left";
  await withDebugger(tabId, async (send) => {
    await send("Input.dispatchMouseEvent", {type: "mouseMoved", x, y});
    for (let count = 1; count <= (kind === "doubleClick" ? 2 : 1); count++) {
      await send("Input.dispatchMouseEvent", {type: "mousePressed", x, y, button, clickCount: count});
      await send("Input.dispatchMouseEvent", {type: "mouseReleased", x, y, button, clickCount: count});
    }
  });
}

async function dragAlong(tabId, from, to) {
  // A real pointer (trusted events) for libraries that drag on mouse or pointer events; HTML5 drag-and-drop
  // sources page.js drags itself.
  await withDebugger(tabId, async (send) => {
    await send("Input.dispatchMouseEvent", {type: "mouseMoved", x: from.x, y: from.y});
    await send("Input.dispatchMouseEvent", {type: "mousePressed", x: from.x, y: from.y, button: "left", clickCount: 1});
    for (let step = 1; step <= DRAG_MOVES; step++) {
      await send("Input.dispatchMouseEvent", {type: "mouseMoved", button: "left", buttons: 1,
        x: from.x + (to.x - from.x) * step / DRAG_MOVES, y: from.y + (to.y - from.y) * step / DRAG_MOVES});
    }
    await send("Input.dispatchMouseEvent", {type: "mouseReleased", x: to.x, y: to.y, button: "left", clickCount: 1});
  });
}

async function choose(tabId, target, option) {
  // A <select> at once; a custom drop-down opened, its options waited for, then the chosen one till it shows.
  const deadline = Date.now() + CHOICE_MS;
  let result = ok(await page(tabId, "select", target, option, {open: true}));
  while (result.pending) {
    if (Date.now() > deadline) throw new Error(`The drop-down ${JSON.stringify(target)} showed no options to choose from.`);
    await sleep(100);
    result = ok(await page(tabId, "select", target, option, {open: false}));
  }
  while (result.widget && !(await page(tabId, "shows", String(result.index), result.selected))) {
    if (Date.now() > deadline) throw new Error(`The option ${JSON.stringify(result.selected)} was clicked, but [${result.index}] does not show it.`);
    await sleep(100);
  }
  return result;
}

function base64Of(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

async function pressKeys(tabId, events) {
  await withDebugger(tabId, async (send) => {
    for (const e of events) {
      const base = keyEvent(e.key || e.code, e.code, e.modifiers);
      if (e.type !== "keyUp") await send("Input.dispatchKeyEvent", {...base, type: base.text ? "keyDown" : "rawKeyDown"});
      if (e.type !== "keyDown") await send("Input.dispatchKeyEvent", {...base, type: "keyUp", text: undefined});
    }
  });
}

function parseCombo(keys) {
  // "Enter", "Control+a", "Shift+Tab": modifiers held while the last key is pressed.
  const parts = String(keys).split("+").map((p) => p.trim()).filter(Boolean);
  const key = parts.pop() || "";
  const modifiers = parts.reduce((m, p) => m | (MODIFIERS[p.toLowerCase()] || 0), 0);
  return [{type: "press", key, modifiers}];
}

function sdkModifiers(m) {
  if (!m) return 0;
  return (m.alt ? 1 : 0) | (m.ctrl ? 2 : 0) | (m.meta ? 4 : 0) | (m.shift ? 8 : 0);
}

// ---- questions answered in the side panel (user_approval, prompt_for_user_input) -------------------
const answers = new Map();  // commandId -> resolve

async function ask(command) {
  await sessionUpdate("questions", (all) => {
    all[command.browserWindowId] = [...(all[command.browserWindowId] || []),
      {commandId: command.commandId, name: command.name, args: command.args, at: new Date().toISOString()}];
    return all;
  });
  openSidePanel(command.chromeWindowId);
  const expires = Date.parse(command.expiresAt) - Date.now();
  try {
    return await new Promise((resolve, reject) => {
      answers.set(command.commandId, resolve);
      setTimeout(() => reject(new Error("Nobody answered in the side panel in time.")), Math.max(expires, 1000));
    });
  } finally {
    answers.delete(command.commandId);
    await sessionUpdate("questions", (all) => {
      all[command.browserWindowId] = (all[command.browserWindowId] || []).filter((q) => q.commandId !== command.commandId);
      return all;
    });
  }
}

function openSidePanel(chromeWindowId) {
  // Needs a user gesture in most Chromium versions; when refused, the popup badge still shows the question.
  chrome.sidePanel.open({windowId: chromeWindowId}).catch(() => {});
  chrome.action.setBadgeText({text: "?"}).catch(() => {});
}

async function addMessage(browserWindowId, text) {
  await sessionUpdate("messages", (all) => {
    all[browserWindowId] = [...(all[browserWindowId] || []), {text, at: new Date().toISOString()}].slice(-50);
    return all;
  });
}

// ---- commands --------------------------------------------------------------------------------------
async function openUrl(c, url, newTab) {
  const href = checkUrl(url);
  let tabId = await drivenTab(c);
  if (newTab) {
    const tab = await chrome.tabs.create({windowId: c.chromeWindowId, url: href, openerTabId: tabId, active: true});
    tabId = tab.id;
    await setDriven(c, tabId);
  } else {
    await chrome.tabs.update(tabId, {url: href});
    await sleep(50);
  }
  const tab = await waitForLoad(tabId);
  return {url: tab.url, title: tab.title};
}

async function tabsInOrder(chromeWindowId) {
  // The driver numbers tabs in the order they opened; Chromium's tab ids grow in that order.
  return (await chrome.tabs.query({windowId: chromeWindowId})).sort((a, b) => a.id - b.id);
}

async function closeTab(c, index) {
  const tabId = index === undefined || index === null ? await drivenTab(c)
    : ((await tabsInOrder(c.chromeWindowId))[Number(index)] || {}).id;
  if (tabId === undefined) throw new Error(`No tab ${index} in this window.`);
  const open = await chrome.tabs.query({windowId: c.chromeWindowId});
  const closesWindow = open.length <= 1;
  await sessionUpdate("tasks", (all) => {
    const task = all[c.browserWindowId];
    if (task && task.tabId === tabId) task.closing = true;
    return all;
  });
  if (closesWindow) return {closes_window: true, __closeWindow: true};
  await chrome.tabs.remove(tabId);
  const [active] = await chrome.tabs.query({windowId: c.chromeWindowId, active: true});
  await sessionUpdate("tasks", (all) => {
    const task = all[c.browserWindowId];
    if (task && task.tabId === tabId) { task.tabId = active.id; delete task.closing; }
    return all;
  });
  return {closes_window: false};
}

async function waitFor(c, check, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const tabId = await drivenTab(c);
    const tab = await chrome.tabs.get(tabId);
    if (tab.status === "complete") {
      try { if (await check(tabId)) return true; } catch (e) { /* navigating: try again */ }
    }
    if (Date.now() > deadline) return false;
    await sleep(250);
  }
}

const COMMANDS = {
  // The extension driver's commands (workers/browser/extension_driver.py).
  task_begin: async (c) => { await beginTask(c); return {}; },
  task_end: async (c) => {
    const all = await tasks();
    const task = all[c.browserWindowId];
    if (task && task.requestId === c.requestId) {
      await sessionUpdate("recent", (recent) => {
        recent[c.browserWindowId] = [{requestId: c.requestId, prompt: task.prompt, status: c.args.status,
          startedAt: task.startedAt, endedAt: new Date().toISOString()}, ...(recent[c.browserWindowId] || [])].slice(0, 20);
        return recent;
      });
      await sessionUpdate("tasks", (t) => { delete t[c.browserWindowId]; return t; });
    }
    return {};
  },
  save_gif: async (c) => {
    const id = String(c.args.requestId || c.requestId).replace(/[^A-Za-z0-9-]/g, "");
    const downloadId = await chrome.downloads.download({url: `data:image/gif;base64,${c.args.base64}`,
      filename: `remote-dispatch/${id}.gif`, conflictAction: "overwrite", saveAs: false});
    return {downloadId, filename: `remote-dispatch/${id}.gif`};
  },
  open: (c) => openUrl(c, c.args.url, c.args.newTab),
  // Replay scripts: how to find an element again, and what a recorded locator matches now.
  describe: async (c) => ok(await page(await drivenTab(c), "describe", c.args.target)),
  resolve: async (c) => ok(await page(await drivenTab(c), "resolve", c.args.locator)),
  current_url: async (c) => ({url: (await chrome.tabs.get(await drivenTab(c))).url}),
  title: async (c) => ({title: (await chrome.tabs.get(await drivenTab(c))).title}),
  back: async (c) => {
    const tabId = await drivenTab(c);
    await chrome.tabs.goBack(tabId);
    await settle(tabId);
    return {url: (await chrome.tabs.get(tabId)).url};
  },
  tabs: async (c) => {
    const driven = await drivenTab(c);
    return (await tabsInOrder(c.chromeWindowId)).map((t, i) =>
      ({index: i, url: t.url, title: t.title, active: t.id === driven}));
  },
  switch_tab: async (c) => {
    const tab = (await tabsInOrder(c.chromeWindowId))[Number(c.args.index)];
    if (!tab) throw new Error(`No tab ${c.args.index} in this window.`);
    await chrome.tabs.update(tab.id, {active: true});
    await setDriven(c, tab.id);
    return {url: tab.url, title: tab.title};
  },
  close_tab: async (c) => {
    const result = await closeTab(c, c.args.index);
    if (result.__closeWindow) {
      c.after = () => chrome.windows.remove(c.chromeWindowId);
      return {closes_window: true};
    }
    return result;
  },
  read: async (c) => ok(await page(await drivenTab(c), "read", {maxChars: c.args.maxChars})),
  html: async (c) => ({html: await page(await drivenTab(c), "html")}),
  extract: async (c) => ok(await page(await drivenTab(c), "extract", c.args.selector)),
  click: async (c) => {
    const tabId = await drivenTab(c);
    const result = ok(await page(tabId, "click", c.args.target));
    await settle(await drivenTab(c));
    return result;
  },
  type: async (c) => ok(await page(await drivenTab(c), "type", c.args.target, c.args.text, {clear: true})),
  select: async (c) => choose(await drivenTab(c), c.args.target, c.args.option),
  drag: async (c) => {
    const tabId = await drivenTab(c);
    const result = ok(await page(tabId, "drag", c.args.source, c.args.target ?? null, {x: c.args.x || 0, y: c.args.y || 0}));
    if (!result.html5) await dragAlong(tabId, result.from, result.to);
    await settle(await drivenTab(c));
    return result;
  },
  scroll: async (c) => ok(await page(await drivenTab(c), "scroll", c.args.direction, c.args.target)),
  hover: async (c) => ok(await page(await drivenTab(c), "hover", c.args.target)),
  press: async (c) => {
    const tabId = await drivenTab(c);
    await pressKeys(tabId, parseCombo(c.args.keys));
    await settle(await drivenTab(c));
    return {};
  },
  wait_for: async (c) => {
    const {text, selector, seconds} = c.args;
    const found = await waitFor(c, async (tabId) =>
      (!text || await page(tabId, "hasText", text)) && (!selector || await page(tabId, "hasElement", selector)),
    (seconds ?? 10) * 1000);
    return {found};
  },
  run_js: async (c) => ({result: await runInPage(await drivenTab(c), c.args.code)}),
  screenshot: async (c) => ({base64: await screenshot(await drivenTab(c), c.chromeWindowId)}),

  // The SDK's extension actions (POST /fast/v2/extension-actions), with its data shapes.
  go_to_url: async (c) => { await openUrl(c, c.args.url, c.args.new_tab); return null; },
  get_url: async (c) => ({url: (await chrome.tabs.get(await drivenTab(c))).url}),
  get_screenshot: async (c) => ({base64_content: await screenshot(await drivenTab(c), c.chromeWindowId),
    name: `screenshot-${Date.now()}.png`, mime_type: "image/png", timestamp: new Date().toISOString()}),
  get_full_html: async (c) => ({html: await page(await drivenTab(c), "html")}),
  get_simplified_html: async (c) => ({html: ok(await page(await drivenTab(c), "read", {})).text}),
  execute_javascript_on_page: async (c) => ({result: await runInPage(await drivenTab(c), c.args.code)}),
  press_key: async (c) => {
    const tabId = await drivenTab(c);
    await pressKeys(tabId, (c.args.events || []).map((e) =>
      ({type: e.type || "keyDown", key: e.key || e.code, code: e.code, modifiers: sdkModifiers(e.modifiers)})));
    return null;
  },
  close_window: async (c) => { c.after = () => chrome.windows.remove(c.chromeWindowId); return null; },
  print_message: async (c) => { await addMessage(c.browserWindowId, String(c.args.message)); return null; },
  wait_for_element: async (c) => {
    const want = c.args.state || "visible";
    const found = await waitFor(c, async (tabId) => {
      const m = ok(await page(tabId, "match", c.args.selectors || {}));
      return want === "hidden" ? !m.count || !m.visible : m.count > 0 && m.visible;
    }, Number(c.args.timeout || 10000));
    return {found};
  },
  agentic_selector: async (c) => {
    const tabId = await drivenTab(c);
    const m = ok(await page(tabId, "match", c.args.selectors || {}));
    // The service adds what the model fallback needs to this error (app/windows/service.py).
    if (!m.count) throw new Error(`No element matches the selectors ${JSON.stringify(c.args.selectors)}.`);
    const action = c.args.action || {type: "click"};
    const target = m.index;
    const verified = c.args.verification_description ? {verified: null} : {};
    switch (action.type) {
      case "click": ok(await page(tabId, "click", target)); await settle(await drivenTab(c)); return {value: null, ...verified};
      case "rightClick": case "doubleClick": {
        const at = ok(await page(tabId, "center", target));
        await mouseAt(tabId, action.type, at.x, at.y);
        await settle(await drivenTab(c));
        return {value: null, ...verified};
      }
      case "hover": ok(await page(tabId, "hover", target)); return {value: null, ...verified};
      case "fill":
        ok(await page(tabId, "type", target, String(action.value ?? ""), {clear: true}));
        if (action.pressEnter) { await pressKeys(tabId, parseCombo("Enter")); await settle(await drivenTab(c)); }
        return {value: null, ...verified};
      case "selectOptionByValue": return {value: ok(await page(tabId, "select", target, String(action.value))).selected};
      case "selectOptionByIndex": {
        const options = ok(await page(tabId, "property", target, "options"));
        const texts = ok(await page(tabId, "extract", `[data-rd-index="${target}"] option`)).texts;
        if (!(action.value in texts)) throw new Error(`No option at index ${action.value} (${options.value ? texts.length : 0} options).`);
        return {value: ok(await page(tabId, "select", target, texts[action.value])).selected};
      }
      case "getText": return {value: m.text};
      case "getProperty": return {value: ok(await page(tabId, "property", target, action.propertyName)).value};
      default: throw new Error(`The selector action '${action.type}' is not supported by this extension.`);
    }
  },
  agentic_mouse_action: async (c) => {
    // The recorded point, scaled from the recorded viewport to this one when resize_window is set.
    const tabId = await drivenTab(c);
    const click = c.args.recorded_click || {}, action = c.args.action || {type: "click"};
    const [width, height] = await runInPage(tabId, "[window.innerWidth, window.innerHeight]");
    const recorded = click.viewport || {};
    let x = Number(click.x), y = Number(click.y);
    if (c.args.resize_window && recorded.width && recorded.height) {
      x = x * width / recorded.width;
      y = y * height / recorded.height;
    }
    if (!(x >= 0 && x < width && y >= 0 && y < height)) {
      throw new Error(`No element matches the selectors: the point (${x}, ${y}) is outside the ${width}x${height} viewport.`);
    }
    if (action.type === "scroll") {
      await withDebugger(tabId, (send) => send("Input.dispatchMouseEvent",
        {type: "mouseWheel", x, y, deltaX: Number(action.deltaX || 0), deltaY: Number(action.deltaY || 0)}));
      await sleep(100);  // the wheel scrolls asynchronously
    } else if (["click", "rightClick", "doubleClick"].includes(action.type)) {
      await mouseAt(tabId, action.type, x, y);
    } else if (action.type === "fill") {
      await mouseAt(tabId, "click", x, y);
      await runInPage(tabId, "const e = document.activeElement; if (e && e.select) e.select(); return null;");
      await withDebugger(tabId, (send) => send("Input.insertText", {text: String(action.text ?? "")}));
      if (action.pressEnter) await pressKeys(tabId, parseCombo("Enter"));
    } else {
      throw new Error(`The mouse action '${action.type}' is not supported by this extension.`);
    }
    await settle(await drivenTab(c));
    return c.args.verification_description ? {verified: null} : null;
  },
  save_pdf_file: async (c) => {
    const tabId = await drivenTab(c);
    const tab = await chrome.tabs.get(tabId);
    const stamp = new Date();
    let shown = null;
    try { shown = await runInPage(tabId, "document.contentType"); } catch (e) { shown = null; /* Chromium's own viewer page */ }
    if (shown === "application/pdf" || (shown === null && /\.pdf($|[?#])/i.test(tab.url))) {
      // The PDF the tab shows: its own bytes (with the user's cookies: the extension may fetch any URL).
      const bytes = new Uint8Array(await (await fetch(tab.url, {credentials: "include"})).arrayBuffer());
      const name = decodeURIComponent(new URL(tab.url).pathname.split("/").pop() || "document.pdf");
      return {base64_content: base64Of(bytes), name: /\.pdf$/i.test(name) ? name : `${name}.pdf`,
        mime_type: "application/pdf", timestamp: stamp.toISOString()};
    }
    const printed = await withDebugger(tabId, (send) => send("Page.printToPDF", {printBackground: true}));
    return {base64_content: printed.data, name: `page-${stamp.getTime()}.pdf`, mime_type: "application/pdf",
      timestamp: stamp.toISOString()};
  },
  user_approval: async (c) => {
    const answer = await ask(c);
    if (answer.aborted) return {__status: "aborted", error: "The user dismissed the question."};
    return {approved: Boolean(answer.approved)};
  },
  prompt_for_user_input: async (c) => {
    const answer = await ask(c);
    if (answer.aborted) return {__status: "aborted", error: "The user dismissed the question."};
    return {values_by_name: answer.values || {}};
  },
  prompt_for_user_file: async (c) => {
    const answer = await ask(c);
    if (answer.aborted) return {__status: "aborted", error: "The user dismissed the question."};
    return {file: answer.file};
  },
};

// ---- messages from this extension's own pages (popup, side panel, options) -------------------------
chrome.runtime.onMessage.addListener((message, sender, reply) => {
  // Only our own pages: no content scripts exist, and pages cannot reach us (no externally_connectable).
  if (sender.id !== chrome.runtime.id || !String(sender.url || "").startsWith(chrome.runtime.getURL(""))) return false;
  (async () => {
    switch (message.type) {
      case "reconnect": generation++; polling = false; pollLoop(); return {ok: true};
      case "answer": {
        const resolve = answers.get(message.commandId);
        if (resolve) resolve(message.answer);
        return {ok: Boolean(resolve)};
      }
      case "api": return await api(message.method, message.path, message.body);
      default: return {error: "unknown message"};
    }
  })().then(reply, (error) => reply({error: String(error.message || error), status: error.status}));
  return true;
});

chrome.storage.onChanged.addListener((changes, area) => {
  if (area === "local" && (changes.serviceUrl || changes.apiKey)) {
    generation++;
    polling = false;
    chrome.storage.local.set({windows: {}}).then(pollLoop);  // new service or key: new window ids
  }
  if (area === "session" && changes.questions) {
    const pending = Object.values(changes.questions.newValue || {}).some((list) => list.length);
    chrome.action.setBadgeText({text: pending ? "?" : ""}).catch(() => {});
  }
});

// A stopped worker is started again by this alarm (and by any event); the loop then picks up every
// command queued meanwhile: they wait as rows in the service's database.
chrome.alarms.create("keepalive", {periodInMinutes: 0.5});
chrome.alarms.onAlarm.addListener(() => pollLoop());
chrome.runtime.onStartup.addListener(() => pollLoop());
chrome.runtime.onInstalled.addListener(() => {
  chrome.sidePanel.setPanelBehavior({openPanelOnActionClick: false}).catch(() => {});
  pollLoop();
});
pollLoop();
