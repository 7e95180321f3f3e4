// Auto-refresh for the console's pages that ask for it (<main
// data-refresh="seconds">): every so often the page is fetched again and
// the parts marked data-live are replaced with the new ones. Nothing is
// refreshed while the tab is hidden, while the operator types in a field
// or has ticked a box (a selection would be lost), or once the operator
// turned it off (the checkbox in the header, kept in localStorage). With
// scripts off the pages are the same, refreshed by reloading them.
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  var box = document.getElementById("auto-refresh");
  if (!main || !box) { return; }
  var every = Math.max(2, parseInt(main.getAttribute("data-refresh"), 10) || 5) * 1000;
  box.closest("label").hidden = false;
  box.checked = localStorage.getItem("inboxd-refresh") !== "off";
  box.addEventListener("change", function () {
    localStorage.setItem("inboxd-refresh", box.checked ? "on" : "off");
  });
  function busy() {
    var a = document.activeElement;
    if (a && main.contains(a) && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA")) { return true; }
    return main.querySelector("input[type=checkbox]:checked") !== null;
  }
  function tick() {
    if (!box.checked || document.hidden || busy()) { return; }
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } }).then(function (r) {
      if (!r.ok) { throw new Error("status " + r.status); }
      return r.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      document.querySelectorAll("[data-live]").forEach(function (el) {
        var fresh = el.id ? doc.getElementById(el.id) : null;
        if (fresh) { el.replaceWith(document.importNode(fresh, true)); }
      });
      var stamp = document.getElementById("refreshed");
      if (stamp) { stamp.textContent = new Date().toLocaleTimeString(); }
      document.documentElement.setAttribute("data-refreshed", String(Date.now()));
    }).catch(function () { /* the next tick tries again */ });
  }
  setInterval(tick, every);
})();
