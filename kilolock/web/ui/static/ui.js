// Kilolock dashboard: the only script. Every page works without it; it adds
// "Copy" buttons to the blocks a state page offers. No inline script exists
// (the Content-Security-Policy forbids it), so this file is all there is.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  if (!navigator.clipboard) { return; }
  document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
    var block = document.getElementById(button.getAttribute("data-copy"));
    if (!block) { return; }
    button.classList.remove("hidden");
    button.setAttribute("aria-label", "Copy the block above");
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(block.textContent).then(function () {
        button.textContent = "Copied";
      });
    });
  });
});
