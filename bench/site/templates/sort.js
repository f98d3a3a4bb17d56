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
})();
