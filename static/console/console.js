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
