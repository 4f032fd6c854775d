"use strict";
setupCommon();
const url = document.getElementById("service-url");
const key = document.getElementById("api-key");
chrome.storage.local.get(["serviceUrl", "apiKey"]).then((s) => {
  url.value = s.serviceUrl || "";
  key.value = s.apiKey || "";
});
document.getElementById("form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const serviceUrl = url.value.trim().replace(/\/+$/, "");
  let parsed;
  try { parsed = new URL(serviceUrl); } catch (e) { parsed = null; }
  if (!parsed || !["http:", "https:"].includes(parsed.protocol)) {
    document.getElementById("saved").textContent = "The service URL must be http(s)://…";
    return;
  }
  await chrome.storage.local.set({serviceUrl, apiKey: key.value.trim()});
  document.getElementById("saved").textContent = "Saved";
  background({type: "reconnect"}).catch(() => {});
});
