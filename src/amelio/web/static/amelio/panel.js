// amelio/panel.js: the person's idle-compute settings (docs/client.md#idle-compute).
//
// A module of its own, imported with import() by `amelio.settingsPanel(el)`: a page may
// compute without showing it, and a page that only sends feedback loads neither it nor
// compute.js. Plain DOM in a shadow root: no framework, and the page's CSS stays out.

import { COMPUTE_TASKS, INTENSITY_PRESETS } from "./compute.js";

/** @typedef {import("./compute.js").ComputeController} ComputeController */

/**
 * What `settingsPanel()` answers.
 * @typedef {Object} SettingsPanel
 * @property {HTMLElement} element The panel's host element (its content is in an open
 *   shadow root).
 * @property {() => void} refresh Show the preferences and status again.
 * @property {() => void} destroy Stop following the controller and remove the panel.
 */

/** What each task type and purpose is called in the panel. */
const TASK_LABELS = Object.freeze({
  "embed_documents:search_index": "Compute search-index embeddings of documents",
});

const REASONS = Object.freeze({
  consent: "Off: you have not allowed it.",
  intensity: "Off: the intensity is 0.",
  starting: "Looking at this device…",
  battery: "Paused: the battery is under 30 % and not charging.",
  tier: "Off: this device is too constrained (DEGRADED).",
  window: "Paused: outside your time window.",
  quota: "Paused: today's limit is used up.",
  budget: "Paused: this hour's budget is used up.",
  active: "Waiting until you stop using the page.",
  "no-tasks": "Nothing to compute right now.",
  server: "The server is busy; trying again later.",
  offline: "The server cannot be reached; trying again later.",
  error: "Paused after an error; trying again later.",
  "other-tab": "Another tab of this site is computing.",
});

const PANEL_CSS = `
:host { display: block; font: inherit; color: inherit; }
section { display: grid; gap: 10px; max-width: 36rem; padding: 12px 14px;
  border: 1px solid #c9ced8; border-radius: 8px; }
p { margin: 0; }
.title { font-weight: 600; }
fieldset { display: grid; gap: 6px; margin: 0; padding: 0; border: 0; min-width: 0; }
legend { font-weight: 600; padding: 0; margin-bottom: 4px; }
.row { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; }
input, button { font: inherit; color: inherit; }
input[type=range] { flex: 1 1 10rem; }
input[type=number] { width: 7rem; }
.presets { display: flex; flex-wrap: wrap; gap: 4px; }
.presets button { padding: 2px 10px; border: 1px solid #8a93a6; border-radius: 999px;
  background: transparent; cursor: pointer; }
.presets button[aria-pressed=true] { background: #2456c7; border-color: #2456c7; color: #fff; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; }
dt { opacity: 0.75; } dd { margin: 0; font-variant-numeric: tabular-nums; }
.status { font-size: 0.92em; }
:focus-visible { outline: 3px solid #f59e0b; outline-offset: 2px; }
`;

/** A DOM element: attributes (on… are listeners) and children (text is text, never HTML). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  el.append(...children);
  return el;
}

function seconds(value) {
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} s`;
}

/**
 * Render the person's compute settings into `el` (appended, in a shadow root so that its
 * styles and the page's stay apart): consent per task and purpose, intensity with its
 * presets, a time window, the daily quota, the device tier, the CPU used against the
 * budget, and a status line. Changes are saved at once.
 * @param {ComputeController} compute
 * @param {Element} el
 * @returns {SettingsPanel}
 */
export function settingsPanel(compute, el) {
  const host = h("div", { class: "amelio-settings" });
  const root = host.attachShadow({ mode: "open" });
  const safely = (fn) => {
    try {
      fn();
      refresh();
    } catch (e) {
      refresh();
      status.textContent = String(e && e.message || e);
    }
  };
  const consents = Object.entries(COMPUTE_TASKS).flatMap(([taskType, purposes]) =>
    purposes.map((purpose) => h("input", {
      type: "checkbox", id: `consent-${taskType}-${purpose}`, "data-task-type": taskType,
      "data-purpose": purpose,
      onchange: (e) => safely(() => compute.setConsent(e.target.checked ? "granted" : "denied",
                                                       { taskType, purpose })),
    })));
  const intensity = h("input", {
    type: "range", id: "intensity", min: 0, max: 100, step: 1,
    oninput: () => { value.textContent = intensity.value; },
    onchange: () => safely(() => compute.setPreferences({ intensity: Number(intensity.value) })),
  });
  // The slider's own aria-valuetext says the value: this copy is for the eyes only.
  const value = h("span", { id: "intensity-value", "aria-hidden": "true" });
  const presets = Object.entries(INTENSITY_PRESETS).map(([name, v]) => h("button", {
    type: "button", "data-intensity": v, "aria-pressed": "false",
    onclick: () => safely(() => compute.setPreferences({ intensity: v })),
  }, `${name[0].toUpperCase()}${name.slice(1)} (${v})`));
  // The panel shows and edits the first window only; the others (a page may set several
  // through setPreferences) stay as they are, and the panel says they exist. Unticking
  // "Only between" means any time: every window goes.
  const onWindow = () => safely(() => {
    const [first, ...others] = compute.preferences().windows;
    if (!windowOn.checked) return compute.setPreferences({ windows: [] });
    if (!from.value) from.value = "09:00";
    if (!to.value) to.value = "18:00";
    const days = first && first.days;
    compute.setPreferences({ windows: [{ ...(days ? { days } : {}), from: from.value.slice(0, 5),
                                         to: to.value.slice(0, 5) }, ...others] });
    return undefined;
  });
  const windowOn = h("input", { type: "checkbox", id: "window-on", onchange: onWindow });
  const from = h("input", { type: "time", id: "window-from", "aria-label": "From",
                            onchange: onWindow });
  const to = h("input", { type: "time", id: "window-to", "aria-label": "To", onchange: onWindow });
  const moreWindows = h("span", { id: "window-more" });
  const quota = h("input", {
    type: "number", id: "quota", min: 0, step: 1, inputmode: "numeric",
    "aria-describedby": "quota-help",
    onchange: () => safely(() => compute.setPreferences({
      dailyQuotaSeconds: quota.value === "" ? null : Math.max(0, Number(quota.value)) })),
  });
  const tier = h("dd", { id: "tier" });
  const hour = h("dd", { id: "cpu-hour" });
  const today = h("dd", { id: "cpu-today" });
  const status = h("p", { class: "status", id: "status", role: "status",
                          "aria-live": "polite" });
  const site = new URL(compute.endpoint, location.href).host;
  root.append(h("style", {}, PANEL_CSS), h("section", { "aria-labelledby": "title" },
    h("p", { id: "title", class: "title" }, "Lend idle computing time"),
    h("p", {}, `With your permission, this page uses your device's spare time to compute `
      + `for ${site}: only while you are not using the page, never on a low battery, and `
      + "within the limits below. Turn it off at any time."),
    h("fieldset", {}, h("legend", {}, "Allow"),
      ...consents.map((box) => h("label", {}, box, " ",
        TASK_LABELS[`${box.dataset.taskType}:${box.dataset.purpose}`]
        || `${box.dataset.taskType} for ${box.dataset.purpose}`))),
    h("div", { class: "row" }, h("label", { for: "intensity" }, "Intensity"), intensity, value),
    h("div", { class: "presets", id: "presets", role: "group", "aria-label": "Intensity presets" },
      ...presets),
    h("fieldset", {}, h("legend", {}, "When"),
      h("div", { class: "row" }, h("label", {}, windowOn, " Only between"), from,
        h("span", {}, "and"), to, moreWindows)),
    h("div", { class: "row" }, h("label", { for: "quota" }, "Daily limit"), quota,
      h("span", { id: "quota-help" }, "CPU seconds per day (empty: no daily limit)")),
    h("dl", {}, h("dt", {}, "Device tier"), tier, h("dt", {}, "CPU this hour"), hour,
      h("dt", {}, "CPU today"), today),
    status));

  function refresh() {
    const p = compute.preferences();
    const s = compute.status();
    for (const box of consents) {
      box.checked = compute.consentFor(box.dataset.taskType || "", box.dataset.purpose || "")
        === "granted";
    }
    if (root.activeElement !== intensity) intensity.value = String(p.intensity);
    value.textContent = String(p.intensity);
    intensity.setAttribute("aria-valuetext", `${p.intensity} of 100`);
    for (const b of presets) {
      b.setAttribute("aria-pressed", String(Number(b.dataset.intensity) === p.intensity));
    }
    const w = p.windows[0];
    windowOn.checked = !!w;
    if (w && root.activeElement !== from) from.value = w.from;
    if (w && root.activeElement !== to) to.value = w.to;
    const more = p.windows.length - 1;
    moreWindows.textContent = more > 0
      ? `(and ${more} other window${more > 1 ? "s" : ""}, unchanged here)` : "";
    if (root.activeElement !== quota) {
      quota.value = p.dailyQuotaSeconds == null ? "" : String(p.dailyQuotaSeconds);
    }
    tier.textContent = s.tier || "…";
    hour.textContent = `${seconds(s.usedLastHour)} of ${seconds(s.cpuSecondsPerHour)}`;
    today.textContent = p.dailyQuotaSeconds == null ? seconds(s.usedToday)
      : `${seconds(s.usedToday)} of ${seconds(p.dailyQuotaSeconds)}`;
    const line = s.state === "working" ? "Computing…"
      : s.state === "stopped" ? "Stopped." : REASONS[s.reason] || s.reason || "";
    const done = s.tasks.computed ? ` ${s.tasks.computed} tasks done.` : "";
    status.textContent = line + done;
  }

  const onStatus = () => refresh();
  compute.addEventListener("status", onStatus);
  el.append(host);
  refresh();
  compute.detectTier().then(refresh, () => {});
  return {
    element: host,
    refresh,
    destroy() {
      compute.removeEventListener("status", onStatus);
      host.remove();
    },
  };
}

