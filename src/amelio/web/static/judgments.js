// Grading judgments from the keyboard: 0, 1, 2, 3 press the grade buttons, s follows
// the skip link. Progressive enhancement: the buttons and the link work without it.
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
  const typing = event.target.closest && event.target.closest("input, textarea, select, [contenteditable]");
  if (typing) return;
  const form = document.querySelector("form[data-judgment-keys]");
  if (!form || form.dataset.sent) return;
  const target = form.querySelector(`[data-key="${CSS.escape(event.key.toLowerCase())}"]`);
  if (!target) return;
  event.preventDefault();
  if (target.tagName === "BUTTON") form.dataset.sent = "1"; // one grade per page
  target.click();
});
