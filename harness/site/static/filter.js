// The index's filter: hide the rows of other board models, boards and cases. Without this script every
// row stays listed. The choice is kept in the address (?board=...), so a filtered list can be linked.
(function () {
  "use strict";
  var names = ["board_model", "board", "case"];
  var form = document.getElementById("filters");
  var rows = document.querySelectorAll("#series tbody tr");
  function apply() {
    var shown = 0;
    rows.forEach(function (row) {
      var keep = names.every(function (n) {
        var v = form.elements[n].value;
        return !v || row.dataset[n] === v;
      });
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    document.getElementById("shown").textContent = shown + " of " + rows.length + " rows shown";
  }
  var query = new URLSearchParams(window.location.search);
  names.forEach(function (n) {
    var select = form.elements[n];
    if (query.get(n)) { select.value = query.get(n); }
    select.addEventListener("change", function () {
      var q = new URLSearchParams();
      names.forEach(function (m) { if (form.elements[m].value) { q.set(m, form.elements[m].value); } });
      try {
        window.history.replaceState(null, "", "?" + q.toString());
      } catch (e) {
        // a file:// page may not rewrite its own address: the filter still applies
      }
      apply();
    });
  });
  form.addEventListener("submit", function (event) { event.preventDefault(); apply(); });
  apply();
}());
