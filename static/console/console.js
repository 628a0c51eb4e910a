// The console's only script of its own (CSP: no inline scripts). Everything
// works without it; it adds the browser's time zone and copy buttons.
(function () {
  "use strict";
  try {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    var current = (document.cookie.match(/(?:^|; )console_tz=([^;]*)/) || [])[1];
    if (zone && decodeURIComponent(current || "") !== zone) {
      // Read by the server on the next page: times are rendered in this zone.
      document.cookie = "console_tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; SameSite=Lax";
    }
  } catch (e) { /* no Intl: the server's default (UTC) stays */ }

  // Polling swaps replace their region: htmx puts focus back on the element
  // with the same id; this puts back the scroll position of scrolled elements
  // with an id (a log excerpt being read), which a new element would lose.
  var scrolled = {};
  document.addEventListener("htmx:beforeSwap", function (event) {
    scrolled = {};
    var target = event.detail.target;
    if (!target || !target.querySelectorAll) { return; }
    Array.prototype.forEach.call(target.querySelectorAll("[id]"), function (el) {
      if (el.scrollTop || el.scrollLeft) { scrolled[el.id] = [el.scrollTop, el.scrollLeft]; }
    });
  });
  document.addEventListener("htmx:afterSettle", function () {
    Object.keys(scrolled).forEach(function (id) {
      var el = document.getElementById(id);
      if (el) { el.scrollTop = scrolled[id][0]; el.scrollLeft = scrolled[id][1]; }
    });
    scrolled = {};
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  });
})();
