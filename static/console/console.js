// The console's only script of its own (CSP: no inline scripts). Everything
// works without it; it adds the browser's time zone, copy buttons, the
// schedule pickers' keyboard handling and the bulk bars' select-all.
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

  // Schedule pickers: a text field of names (or ids) that works without this
  // script; with it, a search box (htmx, server-side) offers matches to pick.
  Array.prototype.forEach.call(document.querySelectorAll("[data-picker]"), function (el) {
    el.hidden = false;
  });

  function resultsOf(search) {
    return document.getElementById(search.getAttribute("aria-controls"));
  }

  function searchOf(results) {
    return results && document.querySelector('[aria-controls="' + results.id + '"]');
  }

  function pick(button) {
    var target = document.getElementById(button.getAttribute("data-pick-target"));
    var value = button.getAttribute("data-pick-value");
    var results = button.closest(".pick-results");
    var search = searchOf(results);
    if (!target) { return; }
    if (button.getAttribute("data-pick-mode") === "add") {
      var lines = target.value.split("\n").map(function (l) { return l.trim(); }).filter(Boolean);
      if (lines.indexOf(value) < 0) { lines.push(value); }
      target.value = lines.join("\n");
      if (search) { search.value = ""; }
    } else {
      target.value = value;
    }
    target.dispatchEvent(new Event("change", { bubbles: true }));
    if (results) { results.innerHTML = ""; }
    (search || target).focus();
  }

  document.addEventListener("keydown", function (event) {
    var el = event.target;
    if (!el.closest) { return; }
    if (el.classList && el.classList.contains("pick-search")) {
      var results = resultsOf(el);
      var first = results && results.querySelector("button.pick");
      if (event.key === "ArrowDown" && first) { event.preventDefault(); first.focus(); }
      else if (event.key === "Escape" && results) { results.innerHTML = ""; }
      else if (event.key === "Enter" && el.form && el.getAttribute("name") === "q") {
        // The add-search sits inside the schedule form: Enter adds the first match, never submits.
        event.preventDefault();
        if (first) { pick(first); }
      }
      return;
    }
    var button = el.closest("button.pick");
    if (!button) { return; }
    var items = Array.prototype.slice.call(button.closest(".pick-results").querySelectorAll("button.pick"));
    var at = items.indexOf(button);
    var owner = searchOf(button.closest(".pick-results"));
    if (event.key === "ArrowDown" && at < items.length - 1) { event.preventDefault(); items[at + 1].focus(); }
    else if (event.key === "ArrowUp") { event.preventDefault(); (at > 0 ? items[at - 1] : owner).focus(); }
    else if (event.key === "Escape") { event.preventDefault(); button.closest(".pick-results").innerHTML = ""; if (owner) { owner.focus(); } }
  });

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

  // The execution page's live log: each answer of its follower (#live-log-follow)
  // appends the new lines (out of band) and puts a new follower. While the reader is
  // at the bottom, the view stays on the newest line; scrolled up to read, it stays
  // where it is. The page keeps the last LIVE_LOG_KEEP lines (the API and schedctl
  // have all of them).
  var LIVE_LOG_KEEP = 5000;
  var logAtBottom = true;
  function liveLog() { return document.getElementById("execution-live-log"); }
  function toBottom() { var el = liveLog(); if (el) { el.scrollTop = el.scrollHeight; } }
  function swapped(event, id) { return event.detail.target && event.detail.target.id === id; }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var el = liveLog();
    if (el && swapped(event, "live-log-follow")) {
      logAtBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 8;
    }
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    var el = liveLog();
    if (el && swapped(event, "live-log-follow")) {
      var spans = el.querySelectorAll("span");
      for (var i = 0; i < spans.length - LIVE_LOG_KEEP; i++) {
        var newline = spans[i].nextSibling;
        if (newline && newline.nodeType === 3) { el.removeChild(newline); }
        el.removeChild(spans[i]);
      }
      if (logAtBottom) { toBottom(); }
    } else if (swapped(event, "live-log")) {
      toBottom();  // a new attempt's log
    }
  });
  toBottom();

  // Bulk bars: rows' checkboxes belong to a bar's form (form="…"); a header
  // checkbox selects the page's rows, and the bar counts what is selected.
  function bulkCount(formId) {
    var boxes = document.querySelectorAll('input[type=checkbox][name=ids][form="' + formId + '"]');
    var checked = Array.prototype.filter.call(boxes, function (b) { return b.checked; }).length;
    var form = document.getElementById(formId);
    var out = form && form.querySelector("[data-selected-count]");
    if (out) { out.textContent = String(checked); out.parentElement.hidden = false; }
    var all = document.querySelector('[data-select-all="' + formId + '"]');
    if (all) { all.hidden = false; all.checked = boxes.length > 0 && checked === boxes.length; }
  }
  function bulkForms() {
    Array.prototype.forEach.call(document.querySelectorAll("form[data-bulk]"), function (f) { bulkCount(f.id); });
  }
  bulkForms();
  document.addEventListener("htmx:afterSettle", bulkForms);
  document.addEventListener("change", function (event) {
    var el = event.target;
    var formId = el.getAttribute && (el.getAttribute("data-select-all") || (el.name === "ids" && el.getAttribute("form")));
    if (!formId) { return; }
    if (el.hasAttribute("data-select-all")) {
      Array.prototype.forEach.call(document.querySelectorAll('input[type=checkbox][name=ids][form="' + formId + '"]'), function (b) { b.checked = el.checked; });
    }
    bulkCount(formId);
  });

  document.addEventListener("click", function (event) {
    var chosen = event.target.closest && event.target.closest("button.pick");
    if (chosen) { pick(chosen); return; }
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  });

  // A table wider than the screen scrolls sideways in place (console.css, phones):
  // keyboard users reach it by Tab (tabindex 0) to scroll it with the arrow keys.
  function scrollers() {
    Array.prototype.forEach.call(document.querySelectorAll("main table"), function (t) {
      var wide = t.scrollWidth > t.clientWidth + 1;
      if (wide && !t.hasAttribute("tabindex")) {
        t.setAttribute("tabindex", "0");
        t.setAttribute("data-scroller", "");
      } else if (!wide && t.hasAttribute("data-scroller")) {
        t.removeAttribute("tabindex");
        t.removeAttribute("data-scroller");
      }
    });
  }
  scrollers();
  window.addEventListener("resize", scrollers);
  document.addEventListener("htmx:afterSettle", scrollers);
})();
