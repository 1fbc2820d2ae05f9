// Progressive enhancement only: every page works without this script.
document.addEventListener("change", (event) => {
  const el = event.target;
  if (el.matches && el.matches("select[data-autosubmit]")) el.form.submit();
});
// Load a proposal's BenchmarkReport the first time its row is opened.
document.addEventListener("toggle", async (event) => {
  const box = event.target;
  if (!(box instanceof HTMLDetailsElement) || !box.open || !box.dataset.lazy || box.dataset.loaded) return;
  box.dataset.loaded = "1";
  const target = box.querySelector(".lazy");
  try {
    const response = await fetch(box.dataset.lazy, { credentials: "same-origin" });
    target.innerHTML = await response.text();
  } catch (err) {
    target.textContent = "Could not load the report: " + err;
  }
}, true);
