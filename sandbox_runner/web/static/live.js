// Live updates: the server says when the records this page shows have changed (server-sent
// events); the page then reloads its content. No polling from the browser.
(function () {
  "use strict";
  var topic = document.body.getAttribute("data-live");
  if (!topic || !window.EventSource) { return; }
  var source = new EventSource("/events?topic=" + encodeURIComponent(topic));
  source.addEventListener("changed", function () { window.location.reload(); });
})();
