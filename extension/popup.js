"use strict";
setupCommon();
document.getElementById("open-panel").addEventListener("click", async () => {
  await chrome.sidePanel.open({windowId: await thisChromeWindowId()});
  window.close();
});
document.getElementById("options").addEventListener("click", () => chrome.runtime.openOptionsPage());
