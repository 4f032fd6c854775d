// Shared by the popup, the side panel and the options page: the connection state and this window's id.
"use strict";

const STATE_TEXT = {
  "connected": "Connected",
  "reconnecting": "Reconnecting…",
  "unauthorized": "Unauthorized (bad API key)",
  "unreachable": "Service unreachable",
  "not configured": "Not configured",
};

async function thisChromeWindowId() {
  const param = new URLSearchParams(location.search).get("window");
  if (param) return Number(param);
  return (await chrome.windows.getCurrent()).id;
}

async function thisBrowserWindowId() {
  const {windows = {}} = await chrome.storage.local.get("windows");
  return windows[String(await thisChromeWindowId())] || null;
}

function renderConnection(connection) {
  const box = document.getElementById("connection");
  if (!box) return;
  const state = (connection && connection.state) || "not configured";
  box.querySelector(".state").className = "state " + state.replace(/ /g, "-");
  box.querySelector(".state").textContent = STATE_TEXT[state] || state;
  box.querySelector(".state").dataset.state = state;
  box.querySelector(".detail").textContent = (connection && connection.detail) || "";
}

async function renderWindowId() {
  const code = document.getElementById("window-id");
  if (!code) return;
  const id = await thisBrowserWindowId();
  code.textContent = id || "(not registered yet)";
  code.dataset.id = id || "";
}

function background(message) {
  return chrome.runtime.sendMessage(message).then((reply) => {
    if (reply && reply.error) {
      const error = new Error(reply.error);
      error.status = reply.status;
      throw error;
    }
    return reply;
  });
}

function setupCommon() {
  const copy = document.getElementById("copy");
  if (copy) {
    copy.addEventListener("click", async () => {
      const id = document.getElementById("window-id").dataset.id;
      if (!id) return;
      await navigator.clipboard.writeText(id).catch(() => {});
      copy.textContent = "Copied";
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
  }
  chrome.storage.session.get("connection").then((s) => renderConnection(s.connection));
  chrome.storage.onChanged.addListener((changes, area) => {
    if (area === "session" && changes.connection) renderConnection(changes.connection.newValue);
    if (area === "local" && changes.windows) renderWindowId();
  });
  renderWindowId();
}
