// Jobs screen: the header checkbox selects or clears every job on the page. Loaded as a
// file (script-src 'self'); the rows' own checkboxes work without it.
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    var all = event.target;
    if (!all || all.id !== "pick-all") { return; }
    var boxes = document.querySelectorAll('#jobs input[type="checkbox"][form="bulk-selected"]');
    for (var i = 0; i < boxes.length; i += 1) { boxes[i].checked = all.checked; }
  });
}());
