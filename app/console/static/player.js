// The task page's recording player: rrweb-player over the task's recording, and a button per actionTrace step
// that moves the player to the moment the step started (the steps also show as marks on the player's bar).
(function () {
  "use strict";
  var box = document.getElementById("player");
  var status = document.getElementById("player-status");
  fetch(box.getAttribute("data-recording-url"), {credentials: "same-origin"}).then(function (r) {
    if (!r.ok) throw new Error(r.status === 404 ? "This task has no recording." : "The recording could not be loaded.");
    return r.json();
  }).then(function (recording) {
    if (recording.events.length < 2) throw new Error("The recording is empty.");
    if (typeof rrwebPlayer === "undefined") throw new Error("The recording player is not installed on this server (make rrweb).");
    status.hidden = true;
    var width = Math.max(320, Math.min(box.clientWidth || 1024, 1280));
    var Player = rrwebPlayer.Player || rrwebPlayer.default || rrwebPlayer;
    var player = new Player({target: box, props: {
      events: recording.events, width: width, height: Math.round(width * 0.6), autoPlay: false,
      tags: {step: "#c0392b"}, mouseTail: false, skipInactive: true}});
    var markers = document.querySelectorAll(".marker");
    Array.prototype.forEach.call(markers, function (button) {
      var offset = Date.parse(button.getAttribute("data-start")) - recording.startedAt;
      button.setAttribute("data-offset", String(Math.max(0, offset)));
      button.addEventListener("click", function () {
        player.goto(Math.max(0, Math.min(offset, recording.durationMs)), false);
      });
    });
    document.body.setAttribute("data-player", "ready");
  }).catch(function (error) {
    status.hidden = false;
    status.textContent = error.message;
    document.body.setAttribute("data-player", "failed");
  });
})();
