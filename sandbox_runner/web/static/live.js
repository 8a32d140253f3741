// Live updates: the server says when the records this page shows have changed (server-sent
// events on /events?topic=…, see web/pages/live.py); the page then fetches itself again and
// swaps its <main> for the new one (no reload flash, scroll kept). No polling from the browser.
// While a field of the page has the focus, the swap waits until it loses it.
(function () {
  "use strict";
  var topic = document.body.getAttribute("data-live");
  if (!topic || !window.EventSource || !window.fetch || !window.DOMParser) { return; }
  var pending = false;
  var busy = false;

  function editing() {
    var active = document.activeElement;
    var main = document.querySelector("main");
    return !!(active && main && main.contains(active) &&
      /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    var next = fresh.querySelector("main");
    var current = document.querySelector("main");
    if (!next || !current) { return; }
    current.replaceWith(document.adoptNode(next));
    if (fresh.title) { document.title = fresh.title; }
  }

  function refresh() {
    if (busy) { pending = true; return; }
    if (editing()) { pending = true; return; }
    pending = false;
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (answer) {
        if (!answer.ok && answer.status !== 400) { throw new Error(String(answer.status)); }
        return answer.text();
      })
      .then(swap)
      .catch(function () { /* the next change tries again */ })
      .then(function () {
        busy = false;
        if (pending) { refresh(); }
      });
  }

  document.addEventListener("focusout", function () {
    if (pending) { window.setTimeout(refresh, 0); }
  });
  var since = Math.floor(window.performance && performance.timeOrigin ? performance.timeOrigin : Date.now());
  var source = new EventSource("/events?topic=" + encodeURIComponent(topic) + "&since=" + since);
  source.addEventListener("changed", refresh);
})();
