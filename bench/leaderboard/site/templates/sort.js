(function () {
  "use strict";
  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) { return numeric ? NaN : ""; }
    var raw = cell.getAttribute("data-v");
    if (raw === null) { raw = cell.textContent; }
    if (numeric) { return raw === "" ? NaN : parseFloat(raw); }
    return raw.toLowerCase();
  }
  function sortTable(table, index, numeric, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (row, i) { row.setAttribute("data-pos", String(i)); });
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric);
      var y = cellValue(b, index, numeric);
      var result = 0;
      if (numeric) {
        var xn = isNaN(x), yn = isNaN(y);
        if (xn || yn) { return xn === yn ? 0 : (xn ? 1 : -1); }
        result = x - y;
      } else {
        result = x < y ? -1 : (x > y ? 1 : 0);
      }
      if (descending) { result = -result; }
      return result !== 0 ? result : Number(a.getAttribute("data-pos")) - Number(b.getAttribute("data-pos"));
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  function setup(table) {
    var headers = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(headers, function (th, index) {
      th.setAttribute("tabindex", "0");
      th.setAttribute("role", "button");
      function activate() {
        var numeric = th.getAttribute("data-type") === "num";
        var current = th.getAttribute("aria-sort");
        var descending = current === "ascending" || (current !== "descending" && th.getAttribute("data-first") === "desc");
        Array.prototype.forEach.call(headers, function (other) { other.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        sortTable(table, index, numeric, descending);
      }
      th.addEventListener("click", activate);
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); activate(); }
      });
    });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), setup);

  // filters: a track is shown when its protocol, threat model and one of its attack families
  // match the selected ones; with a defense selected, only that defense's rows are shown, and
  // tracks without it are hidden
  var selects = document.querySelectorAll("select[data-filter]");
  var counter = document.getElementById("filter-count");
  function selected(key) {
    var el = document.getElementById("filter-" + key);
    return el ? el.value : "";
  }
  function applyFilters() {
    var suite = selected("suite"), protocol = selected("protocol"), threat = selected("threat");
    var family = selected("family"), defense = selected("defense");
    var sections = document.querySelectorAll("section.track");
    var shown = 0;
    Array.prototype.forEach.call(sections, function (section) {
      var families = (section.getAttribute("data-family") || "").split("|");
      var ok = (!suite || section.getAttribute("data-suite") === suite) &&
        (!protocol || section.getAttribute("data-protocol") === protocol) &&
        (!threat || section.getAttribute("data-threat") === threat) &&
        (!family || families.indexOf(family) >= 0);
      var rows = section.querySelectorAll("tbody tr");
      var visible = 0;
      Array.prototype.forEach.call(rows, function (row) {
        var match = !defense || row.getAttribute("data-defense") === defense;
        row.hidden = !match;
        if (match) { visible += 1; }
      });
      section.hidden = !(ok && visible > 0);
      var item = document.querySelector('nav li[data-for="' + section.id + '"]');
      if (item) { item.hidden = section.hidden; }
      if (!section.hidden) { shown += 1; }
    });
    if (counter) { counter.textContent = shown + " of " + sections.length + " tracks shown"; }
  }
  Array.prototype.forEach.call(selects, function (el) { el.addEventListener("change", applyFilters); });
})();
