// Apiary dashboard: keeps the sessions list live. Listens to /live (the API's /v1/stream for the
// signed-in reader) and, on each `status` event, updates the status badge of the session's row in place;
// a session not on the page is announced (and, on the first page without filters, added on top).
// Values from the stream are set with textContent only, never as HTML.
(function () {
  "use strict";
  var table = document.querySelector("table[data-live]");
  var note = document.getElementById("live-note");
  if (!table || !window.EventSource) { return; }
  var body = table.tBodies[0];
  var addNew = table.hasAttribute("data-live-add");
  var updates = 0;

  function say(text) { if (note) { note.textContent = text; } }

  function badge(status) {
    var b = document.createElement("span");
    b.className = "badge s-" + status;
    b.textContent = status.replace(/_/g, " ");
    return b;
  }

  function rowOf(id) {
    for (var i = 0; i < body.rows.length; i++) {
      if (body.rows[i].getAttribute("data-session") === id) { return body.rows[i]; }
    }
    return null;
  }

  function newRow(id) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-session", id);
    var cells = [];
    for (var i = 0; i < table.tHead.rows[0].cells.length; i++) {
      cells.push(tr.appendChild(document.createElement("td")));
    }
    var a = document.createElement("a");
    a.href = "/sessions/" + encodeURIComponent(id);
    var code = document.createElement("code");
    code.textContent = id;
    a.appendChild(code);
    cells[1].appendChild(a);
    body.insertBefore(tr, body.firstChild);
    return tr;
  }

  var source = new EventSource("/live");
  source.addEventListener("ready", function () { say("Live: status changes appear here as they happen."); });
  source.addEventListener("reset", function () { say("Live: reconnected after a long gap; reload for the full list."); });
  source.addEventListener("status", function (e) {
    var t;
    try { t = JSON.parse(e.data); } catch (err) { return; }
    if (!t || typeof t.session_id !== "string" || typeof t.to !== "string") { return; }
    var tr = rowOf(t.session_id);
    if (!tr && addNew) { tr = newRow(t.session_id); }
    updates += 1;
    if (!tr) {
      say("Live: " + updates + " change(s); session " + t.session_id + " is now " + t.to.replace(/_/g, " ") + ".");
      return;
    }
    // Only the badge changes: the statuses below (a queen's "1 stalled below") stay as loaded.
    var cell = tr.cells[0];
    var old = cell.querySelector(".badge");
    if (old) { cell.replaceChild(badge(t.to), old); } else { cell.insertBefore(badge(t.to), cell.firstChild); }
    tr.classList.add("changed");
    say("Live: session " + t.session_id + " is now " + t.to.replace(/_/g, " ") + ".");
  });
  source.onerror = function () { say("Live: connection lost; retrying…"); };
}());
