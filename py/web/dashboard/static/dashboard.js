// Codity dashboard behaviour. Loaded as a file (script-src 'self'); no inline script anywhere.
//
// - Every htmx request carries the session's CSRF token (meta csrf-token) in X-CSRF-Token.
// - Live pages (body data-live="on") listen to /events (server-sent events, fed by NOTIFY
//   and debounced on the server) and fire "codity:changed" on the body, which fragments
//   re-render on. If the stream breaks they poll every 2 s and try the stream again.
// - "codity:tick" fires every 2 s for what changes without a NOTIFY (a worker going silent).
// - Everything stops while the tab is hidden and resumes, with a refresh, when it is shown.
// - Forms (or their submit buttons) with data-confirm ask first; buttons with data-copy copy a text to the clipboard.
(function () {
  "use strict";
  var body = document.body;
  var status = document.getElementById("live-status");
  var source = null, pollTimer = null, tickTimer = null, retryTimer = null;

  function say(text) { if (status) { status.textContent = text; } }
  function changed() { if (window.htmx) { window.htmx.trigger(body, "codity:changed"); } }
  function tick() { if (window.htmx) { window.htmx.trigger(body, "codity:tick"); } }

  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) { event.detail.headers["X-CSRF-Token"] = meta.getAttribute("content"); }
  });

  function stopPolling() { if (pollTimer) { clearInterval(pollTimer); pollTimer = null; } }
  function startPolling() {
    if (!pollTimer) { pollTimer = setInterval(changed, 2000); say("polling every 2 s"); }
  }
  function closeStream() { if (source) { source.close(); source = null; } }
  function openStream() {
    if (source || !window.EventSource) { if (!window.EventSource) { startPolling(); } return; }
    source = new EventSource("/events");
    source.addEventListener("open", function () { stopPolling(); say("live"); });
    source.addEventListener("changed", changed);
    source.addEventListener("error", function () {
      closeStream();
      startPolling();
      if (!retryTimer) {
        retryTimer = setTimeout(function () { retryTimer = null; if (!document.hidden) { openStream(); } }, 5000);
      }
    });
  }
  function start() {
    if (body.getAttribute("data-live") !== "on") { return; }
    openStream();
    if (!tickTimer) { tickTimer = setInterval(tick, 2000); }
  }
  function stop() {
    closeStream();
    stopPolling();
    if (tickTimer) { clearInterval(tickTimer); tickTimer = null; }
    if (body.getAttribute("data-live") === "on") { say("paused while hidden"); }
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { stop(); } else { start(); changed(); tick(); }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var button = event.submitter;
    var question = (button && button.getAttribute("data-confirm"))
      || (form.getAttribute && form.getAttribute("data-confirm"));
    if (question && !window.confirm(question)) { event.preventDefault(); }
  }, true);
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-copy]") : null;
    if (!button || !navigator.clipboard) { return; }
    var target = document.getElementById(button.getAttribute("data-copy"));
    if (target) {
      navigator.clipboard.writeText(target.textContent || "").then(function () {
        button.textContent = "Copied";
      });
    }
  });

  if (!document.hidden) { start(); }
}());
