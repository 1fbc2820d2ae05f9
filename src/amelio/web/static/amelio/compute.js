// amelio/compute.js: idle compute, MartyContributionV1 (docs/client.md#idle-compute).
//
// With the person's consent, and only while they are not using the page, a Web Worker
// (embed-worker.js) computes what the server would otherwise compute itself (today: the
// search index's document embeddings), leased from GET /v1/contributions/tasks and sent
// back to POST /v1/contributions. The server accepts a result only when a second client
// or its own spot-check agrees.
//
// A page gets here through its client (`await amelio.loadCompute()`), which imports this
// module the first time it is asked: a page that only sends feedback never loads it. A
// page that builds its own controls may import it as well, for the exports below.

import {
  CONSENTS, VERSION, backoffMs, errorOf, readJson, retryAfterMs, storage, writeJson,
} from "./feedback.js";

/** @typedef {import("./feedback.js").AmelioClient} AmelioClient */
/** @typedef {import("./feedback.js").AmelioError} AmelioError */
/** @typedef {import("./feedback.js").Consent} Consent */

/** @typedef {"HIGH+" | "HIGH" | "MID+" | "MID" | "LOW+" | "LOW" | "DEGRADED"} DeviceTier */

/**
 * What `deviceTier()` decides from; an unknown fact is null or absent.
 * @typedef {Object} DeviceFacts
 * @property {number|null} [cores] Logical processors (`navigator.hardwareConcurrency`).
 * @property {number|null} [memoryGb] `navigator.deviceMemory` (Chromium only; at most 8).
 * @property {boolean} [webgpu] A WebGPU adapter was found (`navigator.gpu`).
 * @property {{level: number, charging?: boolean}|null} [battery] From
 *   `navigator.getBattery()`; `level` from 0 to 1; `charging` unknown is not discharging.
 * @property {boolean} [saveData] `navigator.connection.saveData` (the browser's data or
 *   battery saver).
 */

/**
 * The person's choices, kept in localStorage per endpoint and project.
 * @typedef {Object} ComputePreferences
 * @property {Object<string, Object<string, Consent>>} consent taskType → purpose → consent;
 *   nothing runs for a pair that is not "granted" (the default: nothing is granted).
 * @property {number} intensity 0–100 (presets in INTENSITY_PRESETS; default 50): scales
 *   the hourly CPU budget, and the rest taken between tasks.
 * @property {ComputeWindow[]} windows When it may run, in local time; empty: any time.
 * @property {number|null} dailyQuotaSeconds CPU-seconds per day (default 600); null: no
 *   daily quota (the hourly budget still holds).
 */

/**
 * A time window in local time; `to` before `from` runs past midnight (on the days of its
 * start), `from` equal to `to` is the whole day.
 * @typedef {Object} ComputeWindow
 * @property {number[]} [days] 0 Sunday … 6 Saturday; absent: every day.
 * @property {string} from "HH:MM"
 * @property {string} to "HH:MM"
 */

/** @typedef {"off" | "minimal" | "low" | "balanced" | "high" | "max"} IntensityPreset */

/**
 * What `setPreferences()` changes; what is absent stays.
 * @typedef {Object} ComputePreferenceChanges
 * @property {Object<string, Object<string, Consent>>} [consent] Merged into the person's:
 *   "unknown" removes a pair.
 * @property {number|IntensityPreset} [intensity] 0–100, or a preset's name.
 * @property {ComputeWindow[]} [windows] Replaces every window.
 * @property {number|null} [dailyQuotaSeconds]
 */

/**
 * Why the controller waits.
 * @typedef {"consent" | "intensity" | "starting" | "battery" | "tier" | "window" | "quota"
 *   | "budget" | "active" | "no-tasks" | "server" | "offline" | "error" | "other-tab"
 * } ComputeWaitReason
 */

/**
 * `compute` init options (every one optional).
 * @typedef {Object} ComputeOptions
 * @property {boolean} [enabled] Start the controller at init (default false: call
 *   `compute.start()`). Started, it still does nothing without the person's consent.
 * @property {number} [idleAfterMs] No pointer, key, wheel, scroll or touch input for this
 *   long makes the page idle (default 30000); a hidden page is idle at once.
 * @property {number} [cpuSecondsPerHour] Lower the tier's hourly CPU budget (a larger
 *   value changes nothing: the page cannot raise it).
 * @property {number} [tasksPerLease] Tasks asked for per lease, 1–8 (default: up to 4,
 *   as many as the hourly budget left covers at the last task's cost; 1 until a task
 *   has run).
 * @property {string|URL} [workerUrl] The embedding worker (default `embed-worker.js`
 *   beside this module: /static/amelio/embed-worker.js).
 * @property {(status: ComputeStatus) => void} [onStatus] Called on every status change
 *   (as the controller's "status" event).
 */

/**
 * @typedef {Object} ComputeCounts
 * @property {number} leased Tasks leased.
 * @property {number} computed Tasks computed and sent.
 * @property {number} accepted Results the server accepted (a second client agreed).
 * @property {number} pending Results waiting for a second opinion.
 * @property {number} rejected Results the server found wrong.
 * @property {number} duplicate
 * @property {number} expired Leases that ran out before the result arrived (409).
 * @property {number} interrupted Tasks dropped because the person came back.
 * @property {number} failed Tasks the worker or the server failed.
 */

/**
 * @typedef {Object} ComputeStatus
 * @property {"stopped" | "waiting" | "working"} state
 * @property {ComputeWaitReason|null} reason Why it waits (null unless waiting): "active"
 *   is the person using the page, "server" a 429 or 5xx.
 * @property {number|null} resumeAtMs When it looks again (epoch ms), when known.
 * @property {DeviceTier|null} tier Null until the device was examined.
 * @property {number} intensity
 * @property {number} cpuSecondsPerHour The hourly budget in force: the tier's, lowered by
 *   the page's option and the server, times intensity / 100.
 * @property {number} usedLastHour CPU-seconds used in the last hour (this browser).
 * @property {number} usedToday CPU-seconds used today (local day).
 * @property {number|null} dailyQuotaSeconds
 * @property {number|null} trust The server's trust in this client (0–1), once known.
 * @property {string|null} clientId
 * @property {ComputeCounts} tasks Counters since this page loaded.
 * @property {string|null} error The last error.
 */

/** The tiers, best first. */
export const DEVICE_TIERS = Object.freeze(["HIGH+", "HIGH", "MID+", "MID", "LOW+", "LOW",
                                           "DEGRADED"]);
/** CPU-seconds per hour each tier may lend at intensity 100; the server enforces the same. */
export const CPU_SECONDS_PER_HOUR = Object.freeze({ "HIGH+": 120, HIGH: 90, "MID+": 60,
                                                    MID: 45, "LOW+": 30, LOW: 15, DEGRADED: 0 });
/** The intensity slider's presets. */
export const INTENSITY_PRESETS = Object.freeze({ off: 0, minimal: 10, low: 25, balanced: 50,
                                                 high: 75, max: 100 });
/** The task types this client can run, and the purposes each may serve. */
export const COMPUTE_TASKS = Object.freeze({ embed_documents: Object.freeze(["search_index"]) });
/** On battery and not charging, below this level nothing runs. */
export const LOW_BATTERY_LEVEL = 0.3;

const DEFAULT_DAILY_QUOTA_S = 600;
const DEFAULT_IDLE_AFTER_MS = 30_000;
const MAX_COMPUTE_BACKOFF_MS = 10 * 60_000;
const INIT_TIMEOUT_MS = 60_000;
/** Tasks per lease when the page does not say: fewer round trips for the server (each
 * lease is a request, whatever it holds) while still a few tens of milliseconds of work
 * at ~5,000 documents/s, so a person coming back drops little. */
const AUTO_TASKS_PER_LEASE = 4;
/** How long a task's lease lasts when the server does not say (its default). */
const DEFAULT_LEASE_SECONDS = 120;

/**
 * `result.vectors` on the wire: base64 (standard alphabet, padded) of the n×d float32
 * matrix, little-endian and row-major. Why not a JSON array: 1 KB of bytes per vector of
 * 256 dimensions instead of ~5 KB of decimal text that the server parses number by
 * number. `matrix` is the worker's answer as it came; its bytes go as they are, since
 * every browser in use is little-endian.
 * @param {Float32Array} matrix
 * @returns {string}
 */
function encodeVectors(matrix) {
  const bytes = new Uint8Array(matrix.buffer, matrix.byteOffset, matrix.byteLength);
  const chunks = [];
  for (let i = 0; i < bytes.length; i += 0x8000) { // a call takes ~64K arguments at most
    chunks.push(String.fromCharCode(...bytes.subarray(i, i + 0x8000)));
  }
  return btoa(chunks.join(""));
}
const HHMM = /^([01]\d|2[0-3]):([0-5]\d)$/;
const NAME = /^[a-z][a-z0-9_]{0,39}$/;
const ACTIVITY = ["pointerdown", "pointermove", "keydown", "wheel", "touchstart", "scroll"];

/**
 * The device tier (docs/client.md#device-tiers): the cores and memory class, "+" with
 * WebGPU, one class lower on battery, DEGRADED when saving data or battery, on battery
 * under 30 %, or under 2 cores / 2 GB. Pure: `deviceFacts()` reads the browser's.
 * @param {DeviceFacts} [facts]
 * @returns {DeviceTier}
 */
export function deviceTier(facts = {}) {
  const cores = Number(facts.cores) > 0 ? Number(facts.cores) : 2;
  const memory = Number(facts.memoryGb) > 0 ? Number(facts.memoryGb) : Infinity;
  const onBattery = !!facts.battery && facts.battery.charging === false;
  if (facts.saveData || lowBattery(facts)) return "DEGRADED";
  let level = cores >= 8 && memory >= 8 ? 0 : cores >= 4 && memory >= 4 ? 1
    : cores >= 2 && memory >= 2 ? 2 : 3;
  if (level === 3) return "DEGRADED";
  if (onBattery) level = Math.min(2, level + 1);
  return /** @type {DeviceTier} */ (["HIGH", "MID", "LOW"][level] + (facts.webgpu ? "+" : ""));
}

/**
 * On battery, known not to be charging, and under LOW_BATTERY_LEVEL. A browser that does
 * not say whether it charges is not taken as discharging: one rule for the tier and for
 * the controller's pause, so the two never disagree.
 * @param {DeviceFacts} facts
 */
function lowBattery(facts) {
  const battery = facts && facts.battery;
  return !!battery && battery.charging === false && Number(battery.level) < LOW_BATTERY_LEVEL;
}

function withTimeout(promise, ms) {
  return Promise.race([promise, new Promise((resolve) => setTimeout(() => resolve(null), ms))]);
}

/**
 * This browser's facts and its BatteryManager (null where the browser has none), which
 * the controller keeps to follow the battery's changes without asking for it again.
 * @returns {Promise<{facts: DeviceFacts, battery: any}>}
 */
async function readDevice() {
  const nav = /** @type {any} */ (navigator);
  const [adapter, battery] = await Promise.all([
    nav.gpu && typeof nav.gpu.requestAdapter === "function"
      ? withTimeout(nav.gpu.requestAdapter().catch(() => null), 3000) : null,
    typeof nav.getBattery === "function"
      ? withTimeout(nav.getBattery().catch(() => null), 3000) : null,
  ]);
  return {
    battery: battery || null,
    facts: {
      cores: nav.hardwareConcurrency || null,
      memoryGb: nav.deviceMemory || null,
      webgpu: !!adapter,
      battery: battery ? { level: battery.level, charging: battery.charging } : null,
      saveData: !!(nav.connection && nav.connection.saveData),
    },
  };
}

/**
 * This browser's facts for `deviceTier()`: cores, memory, a WebGPU adapter, battery,
 * Save-Data. Nothing leaves the page.
 * @returns {Promise<DeviceFacts>}
 */
export async function deviceFacts() {
  return (await readDevice()).facts;
}

function minutesOf(hhmm) {
  const [h, m] = hhmm.split(":");
  return Number(h) * 60 + Number(m);
}

/**
 * Whether `date` (local time) falls in one of `windows`; no window means any time.
 * @param {ComputeWindow[]} windows
 * @param {Date} [date]
 */
export function inTimeWindows(windows, date = new Date()) {
  if (!windows || !windows.length) return true;
  const minute = date.getHours() * 60 + date.getMinutes();
  const day = date.getDay();
  return windows.some((w) => {
    const from = minutesOf(w.from);
    const to = minutesOf(w.to);
    const on = (d) => !w.days || w.days.includes(d);
    if (from === to) return on(day);
    if (from < to) return on(day) && minute >= from && minute < to;
    return (on(day) && minute >= from) || (on((day + 6) % 7) && minute < to);
  });
}

/** @returns {ComputePreferences} */
function defaultPreferences() {
  return { consent: {}, intensity: INTENSITY_PRESETS.balanced, windows: [],
           dailyQuotaSeconds: DEFAULT_DAILY_QUOTA_S };
}

/**
 * `changes` applied over `prefs`, checked; throws a TypeError on a bad value.
 * @param {ComputePreferences} prefs
 * @param {ComputePreferenceChanges} changes
 * @returns {ComputePreferences}
 */
function mergePreferences(prefs, changes) {
  const next = structuredClone(prefs);
  const c = changes || {};
  if (c.consent !== undefined) {
    for (const [type, purposes] of Object.entries(c.consent || {})) {
      if (!NAME.test(type) || !purposes || typeof purposes !== "object") {
        throw new TypeError(`consent is {taskType: {purpose: consent}}, not ${type}`);
      }
      for (const [purpose, value] of Object.entries(purposes)) {
        if (!NAME.test(purpose) || !CONSENTS.includes(value)) {
          throw new TypeError(`consent.${type}.${purpose} is "granted", "denied" or "unknown"`);
        }
        next.consent[type] = next.consent[type] || {};
        if (value === "unknown") delete next.consent[type][purpose];
        else next.consent[type][purpose] = value;
      }
    }
  }
  if (c.intensity !== undefined) {
    const value = typeof c.intensity === "string" && c.intensity in INTENSITY_PRESETS
      ? INTENSITY_PRESETS[c.intensity] : c.intensity;
    if (typeof value !== "number" || !(value >= 0 && value <= 100)) {
      throw new TypeError(`intensity is 0–100 or a preset (${Object.keys(INTENSITY_PRESETS)
        .join(", ")}), not ${c.intensity}`);
    }
    next.intensity = Math.round(value);
  }
  if (c.windows !== undefined) {
    if (!Array.isArray(c.windows)) throw new TypeError("windows is an array of {days?, from, to}");
    next.windows = c.windows.map((w) => {
      if (!w || !HHMM.test(w.from) || !HHMM.test(w.to)) {
        throw new TypeError("a window is {days?: [0–6], from: \"HH:MM\", to: \"HH:MM\"}");
      }
      /** @type {ComputeWindow} */
      const window = { from: w.from, to: w.to };
      if (w.days != null) {
        if (!Array.isArray(w.days) || !w.days.every((d) => Number.isInteger(d) && d >= 0
                                                    && d <= 6)) {
          throw new TypeError("a window's days are 0 (Sunday) to 6 (Saturday)");
        }
        window.days = [...new Set(w.days)].sort();
      }
      return window;
    });
  }
  if (c.dailyQuotaSeconds !== undefined) {
    const q = c.dailyQuotaSeconds;
    if (q !== null && !(typeof q === "number" && q >= 0 && Number.isFinite(q))) {
      throw new TypeError(`dailyQuotaSeconds is a number of seconds ≥ 0 or null, not ${q}`);
    }
    next.dailyQuotaSeconds = q;
  }
  return next;
}

function localDay(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()}`;
}

/** The worker went away mid-call: the person came back, or the controller stopped. */
class Interrupted extends Error {}

/**
 * Idle compute, with the person's consent: `amelio.compute`. Started (`start()`, or the
 * init option `compute: {enabled: true}`), it leases tasks and runs them in a Web Worker
 * only while every condition holds (docs/client.md#when-it-runs), and stops at once when
 * the person comes back.
 */
export class ComputeController extends EventTarget {
  /** @type {AmelioClient} */ #client;
  #cap;
  #idleAfterMs;
  /** @type {number|null} */ #perLease;
  #taskCostS = 0; // CPU-seconds the last task was charged
  #workerUrl;
  #onStatus;
  #scope;
  #prefsKey;
  #stateKey;
  /** @type {ComputePreferences} */ #prefs;
  #memory = { prefs: null, state: null }; // when localStorage refuses
  #started = false;
  #working = false;
  #gen = 0;
  #timer = 0;
  #lastInput = Date.now();
  /** @type {DeviceFacts|null} */ #facts = null;
  #factsPromise = null;
  #battery = null; // the BatteryManager, kept to follow its changes
  #watching = false; // the battery and connection listeners are in #off
  #off = [];
  /** @type {Worker|null} */ #worker = null;
  #workerModel = null;
  #ready = null;
  #calls = new Map();
  #seq = 0;
  #abort = null;
  #sleeps = new Set();
  #waitUntil = 0;
  #waitReason = null;
  #attempt = 0;
  #serverBudget = null;
  #error = null;
  #shown = "";
  /** What changes only when shown; status() reads the rest afresh. */
  #status = { state: "stopped", reason: null, resumeAtMs: null };
  /** @type {ComputeCounts} */
  #counts = { leased: 0, computed: 0, accepted: 0, pending: 0, rejected: 0, duplicate: 0,
              expired: 0, interrupted: 0, failed: 0 };

  /**
   * @param {AmelioClient} client
   * @param {ComputeOptions} [options]
   */
  constructor(client, options = {}) {
    super();
    const o = options || {};
    this.#client = client;
    const cap = Number(o.cpuSecondsPerHour);
    this.#cap = o.cpuSecondsPerHour != null && cap >= 0 ? cap : Infinity;
    const idle = Number(o.idleAfterMs ?? DEFAULT_IDLE_AFTER_MS);
    this.#idleAfterMs = idle >= 0 ? idle : DEFAULT_IDLE_AFTER_MS;
    this.#perLease = o.tasksPerLease == null ? null // auto: see #leaseSize
      : Math.max(1, Math.min(8, Math.round(Number(o.tasksPerLease)) || 1));
    this.#workerUrl = new URL(String(o.workerUrl || new URL("./embed-worker.js",
                                                            import.meta.url)), location.href);
    this.#onStatus = o.onStatus || null;
    this.#scope = `${client.endpoint}#${client.project}`;
    this.#prefsKey = `amelio:compute:prefs:${this.#scope}`;
    this.#stateKey = `amelio:compute:state:${this.#scope}`;
    this.#prefs = this.#loadPrefs();
    if (o.enabled) this.start();
  }

  // -- the page's and the person's controls ---------------------------------------------

  /** Start: from now on it works whenever every condition holds (consent first). */
  start() {
    if (this.#started) return;
    this.#started = true;
    this.#lastInput = Date.now(); // idle means no input for idleAfterMs since the start
    const onInput = () => this.#onActivity();
    for (const type of ACTIVITY) {
      this.#listen(window, type, onInput, { capture: true, passive: true });
    }
    this.#listen(document, "visibilitychange", () => {
      if (document.visibilityState === "visible") this.#onActivity();
      else this.#tick();
    });
    this.#listen(window, "pagehide", () => this.#interrupt());
    this.#listen(window, "pageshow", () => this.#tick());
    this.#listen(window, "storage", (e) => {
      if (/** @type {StorageEvent} */ (e).key === this.#prefsKey) { // another tab's panel
        this.#prefs = this.#loadPrefs();
        this.#recheck();
      }
    });
    this.#watchDevice();
    this.#tick();
  }

  /** Stop: the worker is terminated and its task dropped (its lease expires). */
  stop() {
    if (!this.#started) return;
    this.#started = false;
    for (const off of this.#off) off();
    this.#off = [];
    this.#watching = false;
    this.#interrupt();
    clearTimeout(this.#timer);
    this.#timer = 0;
    this.#show("stopped", null, null);
  }

  /** @returns {ComputeStatus} */
  status() {
    const { state, reason, resumeAtMs } = this.#status;
    return this.#snapshot(state, reason, resumeAtMs);
  }

  /** @returns {ComputePreferences} a copy */
  preferences() {
    return structuredClone(this.#prefs);
  }

  /**
   * Change the person's preferences (what is not given stays) and keep them in
   * localStorage. `intensity` may be a preset's name. Throws a TypeError on a bad value.
   * @param {ComputePreferenceChanges} changes
   * @returns {ComputePreferences}
   */
  setPreferences(changes) {
    const before = this.#consented().length;
    this.#prefs = mergePreferences(this.#prefs, changes);
    this.#savePrefs();
    if (before && !this.#consented().length) this.#forgetClient();
    this.#recheck();
    return this.preferences();
  }

  /**
   * The person's compute consent, for one task type and purpose or (by default) for
   * every one this client knows (COMPUTE_TASKS). A task type or purpose it does not know
   * throws a TypeError: a consent nothing would ever read must not look given.
   * @param {Consent} consent
   * @param {{taskType?: string, purpose?: string}} [which]
   */
  setConsent(consent, which = {}) {
    const { taskType, purpose } = which || {};
    if (taskType && !Object.hasOwn(COMPUTE_TASKS, taskType)) {
      throw new TypeError(`unknown compute task type "${taskType}" (known: `
                          + `${Object.keys(COMPUTE_TASKS).join(", ")})`);
    }
    const types = taskType ? [taskType] : Object.keys(COMPUTE_TASKS);
    const known = [...new Set(types.flatMap((type) => COMPUTE_TASKS[type]))];
    if (purpose && !known.includes(purpose)) {
      throw new TypeError(`unknown purpose "${purpose}" for ${taskType || "compute"} `
                          + `(known: ${known.join(", ")})`);
    }
    /** @type {Object<string, Object<string, Consent>>} */
    const map = {};
    for (const type of types) {
      for (const p of COMPUTE_TASKS[type]) {
        if (!purpose || purpose === p) (map[type] = map[type] || {})[p] = consent;
      }
    }
    this.setPreferences({ consent: map });
  }

  /**
   * The consent in force for a task type and purpose.
   * @param {string} taskType
   * @param {string} purpose
   * @returns {Consent}
   */
  consentFor(taskType, purpose) {
    const c = this.#prefs.consent[taskType];
    return (c && c[purpose]) || "unknown";
  }

  /** Amelio's base URL (the client's). */
  get endpoint() {
    return this.#client.endpoint;
  }

  /** The device tier, null until the device was examined (see detectTier). */
  get tier() {
    return this.#facts ? deviceTier(this.#facts) : null;
  }

  /**
   * Examine the device (cores, memory, WebGPU, battery) now; local, nothing is sent.
   * @returns {Promise<DeviceTier>}
   */
  async detectTier() {
    await this.#loadFacts();
    return /** @type {DeviceTier} */ (this.tier);
  }

  // -- when it works ------------------------------------------------------------------

  #listen(target, type, handler, options) {
    target.addEventListener(type, handler, options);
    this.#off.push(() => target.removeEventListener(type, handler, options));
  }

  #consented() {
    /** @type {{taskType: string, purpose: string}[]} */
    const pairs = [];
    for (const [type, purposes] of Object.entries(COMPUTE_TASKS)) {
      for (const purpose of purposes) {
        if (this.consentFor(type, purpose) === "granted") pairs.push({ taskType: type, purpose });
      }
    }
    return pairs;
  }

  #budget() {
    const tier = this.tier;
    let budget = Math.min(tier ? CPU_SECONDS_PER_HOUR[tier] : 0, this.#cap);
    if (typeof this.#serverBudget === "number") budget = Math.min(budget, this.#serverBudget);
    return budget * this.#prefs.intensity / 100;
  }

  #loadFacts() {
    if (!this.#factsPromise) {
      this.#factsPromise = readDevice().catch(() => ({ facts: {}, battery: null }))
        .then(({ facts, battery }) => {
          this.#facts = facts;
          this.#battery = battery;
          this.#watchDevice();
          this.#recheck();
        });
    }
    return this.#factsPromise;
  }

  /** Follow the battery and Save-Data while started only: through #off, stop() (and a
   *  panel that merely showed the tier) leaves nothing listening. */
  #watchDevice() {
    if (!this.#started || this.#watching || !this.#facts) return;
    this.#watching = true;
    const facts = this.#facts;
    const battery = this.#battery;
    const connection = /** @type {any} */ (navigator).connection;
    const read = () => { // they may have changed while nothing listened
      if (battery) facts.battery = { level: battery.level, charging: battery.charging };
      if (connection) facts.saveData = !!connection.saveData;
    };
    read();
    const update = () => {
      read();
      this.#recheck();
    };
    if (battery && typeof battery.addEventListener === "function") {
      this.#listen(battery, "levelchange", update);
      this.#listen(battery, "chargingchange", update);
    }
    if (connection && typeof connection.addEventListener === "function") {
      this.#listen(connection, "change", update);
    }
  }

  /** Why it may not work now, and when to look again (ms; null: an event will tell). */
  #blocked() {
    const now = Date.now();
    const p = this.#prefs;
    if (!this.#consented().length) return { reason: "consent", ms: null };
    if (p.intensity <= 0) return { reason: "intensity", ms: null };
    if (!this.#facts) {
      this.#loadFacts();
      return { reason: "starting", ms: null };
    }
    if (lowBattery(this.#facts)) return { reason: "battery", ms: 60_000 };
    if (this.tier === "DEGRADED") return { reason: "tier", ms: 60_000 };
    if (!inTimeWindows(p.windows, new Date(now))) {
      return { reason: "window", ms: 60_000 - (now % 60_000) + 50 };
    }
    const usage = this.#usage(now);
    if (p.dailyQuotaSeconds != null && usage.today >= p.dailyQuotaSeconds) {
      const midnight = new Date(now);
      midnight.setHours(24, 0, 0, 50);
      return { reason: "quota", ms: Math.min(midnight.getTime() - now, 3_600_000) };
    }
    if (usage.lastHour >= this.#budget()) return { reason: "budget", ms: 60_000 };
    if (now < this.#waitUntil) return { reason: this.#waitReason, ms: this.#waitUntil - now };
    const quietFor = now - this.#lastInput;
    if (document.visibilityState !== "hidden" && quietFor < this.#idleAfterMs) {
      return { reason: "active", ms: this.#idleAfterMs - quietFor };
    }
    return null;
  }

  #tick() {
    clearTimeout(this.#timer);
    this.#timer = 0;
    if (!this.#started || this.#working) return;
    const blocked = this.#blocked();
    if (blocked) {
      if (blocked.ms != null) this.#timer = setTimeout(() => this.#tick(), blocked.ms);
      this.#show("waiting", blocked.reason,
                 blocked.ms == null ? null : Date.now() + blocked.ms);
      return;
    }
    const gen = this.#gen;
    this.#working = true;
    this.#show("working", null, null);
    this.#locked(gen).catch((e) => this.#fail(String(e && e.message || e)))
      .finally(() => {
        if (gen !== this.#gen) return; // interrupted: that already moved on
        this.#working = false;
        this.#tick();
      });
  }

  /** A preference or a fact changed: stop what may no longer run, look again. */
  #recheck() {
    if (this.#working && this.#blocked()) this.#interrupt();
    if (this.#started) this.#tick();
    else this.#emit();
  }

  #onActivity() {
    this.#lastInput = Date.now();
    if (!this.#working) return; // the timer looks again when idleAfterMs has passed
    this.#counts.interrupted++;
    this.#interrupt();
    this.#tick();
  }

  /** Drop the work in progress at once: worker terminated, lease fetch aborted. */
  #interrupt() {
    this.#gen++;
    this.#working = false;
    if (this.#abort) this.#abort.abort();
    this.#abort = null;
    this.#killWorker();
    for (const sleep of this.#sleeps) sleep(false);
    this.#sleeps.clear();
  }

  /** Resolves true after `ms`, or false at once if the work is interrupted meanwhile. */
  #sleep(ms) {
    return new Promise((resolve) => {
      const done = (/** @type {boolean} */ value) => {
        clearTimeout(timer);
        this.#sleeps.delete(done);
        resolve(value);
      };
      const timer = setTimeout(() => done(true), ms);
      this.#sleeps.add(done);
    });
  }

  #idle() {
    return new Promise((resolve) => {
      if (typeof requestIdleCallback === "function") {
        requestIdleCallback(() => resolve(undefined), { timeout: 1000 });
      } else {
        setTimeout(resolve, 1);
      }
    });
  }

  #wait(ms, reason) {
    this.#waitUntil = Date.now() + ms;
    this.#waitReason = reason;
  }

  async #backoff(response, reason) {
    this.#attempt++;
    const asked = await retryAfterMs(response);
    this.#wait(asked || backoffMs(this.#attempt, MAX_COMPUTE_BACKOFF_MS), reason);
  }

  /** Every failure of the work goes here: reported, and a long wait, so that a worker
   *  that keeps failing, or a server that keeps refusing, is not asked again at once
   *  (lease, fail, lease…). */
  #fail(message, status) {
    this.#error = message;
    this.#wait(MAX_COMPUTE_BACKOFF_MS, "error");
    /** @type {AmelioError} */
    const error = { message: `compute: ${message}` };
    if (status) error.status = status;
    this.#client._onError(error);
  }

  // -- the work ---------------------------------------------------------------------

  /** One tab of the browser works at a time (Web Locks); the others wait. */
  async #locked(gen) {
    const locks = /** @type {any} */ (navigator).locks;
    if (!locks) return this.#cycle(gen);
    const ran = await locks.request(`amelio-compute:${this.#scope}`, { ifAvailable: true },
                                    async (lock) => lock ? (await this.#cycle(gen), true) : false);
    if (!ran) this.#wait(5000, "other-tab");
  }

  /** Lease tasks, run them one by one while still idle, send each result. */
  async #cycle(gen) {
    const lease = await this.#lease(gen);
    if (!lease) return;
    for (const task of lease.tasks) {
      if (gen !== this.#gen || this.#blocked()) return; // dropped: its lease expires
      if (Date.now() > task.leaseExpiresMs - 1000) {
        this.#counts.expired++;
        continue;
      }
      await this.#idle();
      if (gen !== this.#gen) return;
      const done = await this.#compute(task, lease.leasedMs, gen);
      if (!done) return;
      await this.#submit(task, done);
      this.#emit();
      const p = this.#prefs.intensity;
      const rest = p > 0 ? done.wallMs * (100 - p) / p : 0;
      if (gen !== this.#gen || (rest >= 1 && !(await this.#sleep(rest)))) return;
    }
  }

  /**
   * Tasks to ask for: `tasksPerLease` when the page set it; otherwise up to
   * AUTO_TASKS_PER_LEASE, as many as the hourly budget left covers at the cost of the
   * last task (1 before any ran), so a lease never holds work the budget cannot pay for
   * (its tasks would only expire on the server).
   */
  #leaseSize() {
    if (this.#perLease != null) return this.#perLease;
    if (!(this.#taskCostS > 0)) return 1;
    const left = this.#budget() - this.#usage(Date.now()).lastHour;
    return Math.max(1, Math.min(AUTO_TASKS_PER_LEASE, Math.floor(left / this.#taskCostS)));
  }

  async #lease(gen) {
    const pairs = this.#consented();
    const state = this.#state();
    const params = new URLSearchParams({
      tier: /** @type {string} */ (this.tier),
      purposes: [...new Set(pairs.map((x) => x.purpose))].join(","),
      types: [...new Set(pairs.map((x) => x.taskType))].join(","),
      max: String(this.#leaseSize()),
      cpuSecondsLastHour: this.#usage(Date.now(), state).lastHour.toFixed(3),
    });
    if (state.clientToken) params.set("clientToken", state.clientToken);
    const abort = new AbortController();
    this.#abort = abort;
    let response = null;
    try {
      response = await fetch(`${this.#client.endpoint}/v1/contributions/tasks?${params}`, {
        headers: this.#client._headers(), mode: "cors", credentials: "omit", cache: "no-store",
        signal: abort.signal });
    } catch {
      response = null;
    }
    if (this.#abort === abort) this.#abort = null;
    if (gen !== this.#gen) return null;
    if (!response) {
      await this.#backoff(null, "offline");
      return null;
    }
    if (response.status === 429 || response.status >= 500) {
      await this.#backoff(response, "server");
      return null;
    }
    if (response.status !== 200) {
      const error = await errorOf(response);
      if (error.code === "invalid_client_token" && state.clientToken) {
        this.#forgetClient(); // another server's, or altered: ask for a new identity
        this.#wait(1000, "server");
      } else {
        this.#fail(error.message, response.status);
      }
      return null;
    }
    const leasedMs = Date.now();
    const body = await response.json().catch(() => null);
    if (!body || !Array.isArray(body.tasks)) {
      await this.#backoff(null, "server");
      return null;
    }
    this.#attempt = 0;
    this.#error = null;
    if (this.#consented().length) this.#remember(body); // unless withdrawn meanwhile
    if (body.budget && typeof body.budget.cpuSecondsPerHour === "number") {
      this.#serverBudget = body.budget.cpuSecondsPerHour;
    }
    const leaseSeconds = body.leaseSeconds > 0 ? body.leaseSeconds : DEFAULT_LEASE_SECONDS;
    // Only what the person consented to runs, whatever a server sends.
    const tasks = body.tasks.filter((t) => t && this.consentFor(t.taskType, t.purpose) === "granted"
                                     && t.taskType === "embed_documents" && t.input
                                     && Array.isArray(t.input.texts));
    for (const t of tasks) {
      t.leaseExpiresMs = Number(t.leaseExpiresMs) || leasedMs + leaseSeconds * 1000;
    }
    this.#counts.leased += tasks.length;
    if (!tasks.length) {
      this.#wait(Math.max(1000, Number(body.retryAfterMs) || 30_000), "no-tasks");
      this.#emit();
      return null;
    }
    return { tasks, leasedMs };
  }

  #remember(body) {
    const state = this.#state();
    if (body.clientToken) state.clientToken = String(body.clientToken);
    if (body.clientId) state.clientId = String(body.clientId);
    if (typeof body.trust === "number") state.trust = body.trust;
    this.#saveState(state);
  }

  #makeWorker() {
    const url = this.#workerUrl;
    if (url.origin === location.origin) return new Worker(url, { type: "module" });
    // A worker must come from the page's origin: a same-origin module that imports
    // Amelio's (fetched with CORS, as amelio.js itself was).
    const shim = new Blob([`import ${JSON.stringify(url.href)};\n`], { type: "text/javascript" });
    const blobUrl = URL.createObjectURL(shim);
    try {
      return new Worker(blobUrl, { type: "module" });
    } finally {
      setTimeout(() => URL.revokeObjectURL(blobUrl), 60_000);
    }
  }

  #killWorker() {
    const worker = this.#worker;
    this.#worker = null;
    this.#workerModel = null;
    this.#ready = null;
    if (worker) worker.terminate();
    const calls = [...this.#calls.values()];
    this.#calls.clear();
    for (const call of calls) call.reject(new Interrupted("interrupted"));
  }

  /** Post `message` to the worker; resolves with its answer (`key` matches it). */
  #call(key, message, timeoutMs) {
    const worker = /** @type {Worker} */ (this.#worker);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#calls.delete(key);
        reject(new Error(`the worker did not answer in ${Math.round(timeoutMs / 1000)} s`));
        if (this.#worker === worker) this.#killWorker();
      }, timeoutMs);
      this.#calls.set(key, {
        resolve: (value) => { clearTimeout(timer); resolve(value); },
        reject: (error) => { clearTimeout(timer); reject(error); },
      });
      worker.postMessage(message);
    });
  }

  #onMessage(worker, m) {
    if (worker !== this.#worker || !m || typeof m !== "object") return;
    const key = m.type === "ready" || (m.type === "error" && m.id == null) ? "init" : m.id;
    const call = this.#calls.get(key);
    if (!call) return;
    this.#calls.delete(key);
    if (m.type === "error") call.reject(new Error(m.message || "the worker failed"));
    else call.resolve(m);
  }

  /** The worker for `model`, loaded (its load time is charged to the budget). */
  async #ensureWorker(model) {
    if (this.#worker && this.#workerModel === model) return this.#ready;
    this.#killWorker();
    const worker = this.#makeWorker();
    this.#worker = worker;
    this.#workerModel = model;
    worker.onmessage = (e) => this.#onMessage(worker, e.data);
    worker.onerror = (e) => {
      e.preventDefault();
      const call = this.#calls.get("init");
      this.#calls.delete("init");
      if (call) call.reject(new Error(e.message || "the worker could not start"));
      if (this.#worker === worker) this.#killWorker();
    };
    const started = performance.now();
    const modelBase = `${this.#client.endpoint}/v1/contributions/models/`
      + `${encodeURIComponent(model)}/`;
    this.#ready = this.#call("init", { type: "init", modelBase }, INIT_TIMEOUT_MS)
      .then((ready) => {
        const wall = performance.now() - started;
        const loadMs = Number(ready.loadMs);
        this.#charge((loadMs >= 0 ? Math.min(loadMs, wall) : wall) / 1000);
        return ready;
      }, (error) => {
        if (this.#worker === worker) this.#killWorker(); // a later task starts a new one
        throw error;
      });
    return this.#ready;
  }

  async #compute(task, leasedMs, gen) {
    try {
      await this.#ensureWorker(String(task.model));
    } catch (e) {
      if (gen === this.#gen && !(e instanceof Interrupted)) {
        this.#counts.failed++;
        this.#fail(`the worker: ${e.message}`);
      }
      return null;
    }
    if (gen !== this.#gen) return null;
    const startedMs = Date.now();
    const started = performance.now();
    const id = `t${++this.#seq}`;
    let answer = null;
    try {
      const timeout = Math.max(5000, task.leaseExpiresMs - Date.now());
      answer = await this.#call(id, { type: "embed", id, texts: task.input.texts }, timeout);
    } catch (e) {
      if (gen === this.#gen && !(e instanceof Interrupted)) {
        this.#counts.failed++;
        this.#fail(`the worker: ${e.message}`);
      }
      return null;
    } finally {
      this.#charge((performance.now() - started) / 1000); // what it took, even if dropped
    }
    const wallMs = performance.now() - started;
    this.#taskCostS = wallMs / 1000;
    const matrix = answer.vectors;
    if (!(matrix instanceof Float32Array)
        || matrix.length !== task.input.texts.length * task.dimensions) {
      this.#counts.failed++;
      this.#fail("the worker returned vectors of the wrong count or size");
      return null;
    }
    const vectors = encodeVectors(matrix);
    const computeMs = Number(answer.computeMs) >= 0 ? Number(answer.computeMs) : wallMs;
    return { vectors, leasedMs, startedMs, finishedMs: Date.now(), computeMs, wallMs };
  }

  async #submit(task, done) {
    if (this.consentFor(task.taskType, task.purpose) !== "granted") return; // withdrawn
    const body = JSON.stringify({
      contributionVersion: "v1", taskId: task.taskId, leaseId: task.leaseId,
      clientToken: this.#state().clientToken, taskType: task.taskType,
      inputDigest: task.inputDigest,
      result: { model: task.model, dimensions: task.dimensions, vectors: done.vectors },
      deviceTier: this.tier, clientVersion: `amelio.js/${VERSION}`,
      timings: { leasedMs: done.leasedMs, startedMs: done.startedMs,
                 finishedMs: done.finishedMs, computeMs: Math.round(done.computeMs * 1000) / 1000 },
      consent: { compute: "granted", purpose: task.purpose },
    });
    for (;;) {
      let response = null;
      try {
        response = await fetch(`${this.#client.endpoint}/v1/contributions`, {
          method: "POST", body, headers: this.#client._headers(true), mode: "cors",
          credentials: "omit" });
      } catch {
        response = null;
      }
      if (response && response.status === 200) {
        this.#attempt = 0;
        const answer = await response.json().catch(() => null);
        this.#counts.computed++; // with its status, at once: status() never sees one alone
        const status = answer && answer.status;
        if (status in this.#counts && status !== "computed") this.#counts[status]++;
        if (answer && typeof answer.trust === "number" && this.#consented().length) {
          this.#remember({ trust: answer.trust });
        }
        return;
      }
      if (response && response.status === 409) { // the lease ran out: the task went elsewhere
        this.#counts.expired++;
        return;
      }
      if (response && response.status !== 429 && response.status < 500) {
        this.#counts.failed++;
        const error = await errorOf(response);
        if (error.code === "invalid_client_token") this.#forgetClient();
        this.#fail(error.message, response.status);
        return;
      }
      await this.#backoff(response, response ? "server" : "offline");
      const waitMs = this.#waitUntil - Date.now();
      if (!this.#started || Date.now() + waitMs > task.leaseExpiresMs - 1000
          || !(await this.#sleep(waitMs))) {
        return; // the lease would run out first: the task goes to another client
      }
    }
  }

  // -- what it keeps: preferences, and the client's token and CPU use -------------------

  #loadPrefs() {
    const saved = readJson(storage("localStorage"), this.#prefsKey) || this.#memory.prefs;
    try {
      return saved ? mergePreferences(defaultPreferences(), saved) : defaultPreferences();
    } catch {
      return defaultPreferences(); // unreadable: start again
    }
  }

  #savePrefs() {
    this.#memory.prefs = this.#prefs; // localStorage refusing, they last as long as the page
    writeJson(storage("localStorage"), this.#prefsKey, this.#prefs);
  }

  /** The client's token, trust and CPU use, shared by the browser's tabs. */
  #state() {
    const state = readJson(storage("localStorage"), this.#stateKey) || this.#memory.state;
    return { clientToken: null, clientId: null, trust: null, minutes: {}, day: "",
             daySeconds: 0, ...(state || {}) };
  }

  #saveState(state) {
    this.#memory.state = state;
    writeJson(storage("localStorage"), this.#stateKey, state);
  }

  /** Consent withdrawn: the client's token goes (its CPU use stays, so the budget holds). */
  #forgetClient() {
    const state = this.#state();
    state.clientToken = null;
    state.clientId = null;
    state.trust = null;
    this.#saveState(state);
  }

  #charge(seconds) {
    if (!(seconds > 0)) return;
    const now = Date.now();
    const minute = Math.floor(now / 60_000);
    const state = this.#state();
    /** @type {Record<string, number>} */
    const minutes = {};
    for (const [at, used] of Object.entries(state.minutes)) {
      if (Number(at) > minute - 60) minutes[at] = used;
    }
    minutes[minute] = (minutes[minute] || 0) + seconds;
    state.minutes = minutes;
    const day = localDay(now);
    if (state.day !== day) {
      state.day = day;
      state.daySeconds = 0;
    }
    state.daySeconds += seconds;
    this.#saveState(state);
  }

  /** CPU-seconds used in the last hour and today, from `state` (default: as kept now). */
  #usage(now, state = this.#state()) {
    const minute = Math.floor(now / 60_000);
    let lastHour = 0;
    for (const [at, used] of Object.entries(state.minutes)) {
      if (Number(at) > minute - 60) lastHour += used;
    }
    return { lastHour, today: state.day === localDay(now) ? state.daySeconds : 0 };
  }

  // -- status ---------------------------------------------------------------------------

  #snapshot(state, reason, resumeAtMs) {
    const saved = this.#state();
    const usage = this.#usage(Date.now(), saved);
    return {
      state, reason, resumeAtMs, tier: this.tier, intensity: this.#prefs.intensity,
      cpuSecondsPerHour: Math.round(this.#budget() * 1000) / 1000,
      usedLastHour: Math.round(usage.lastHour * 1000) / 1000,
      usedToday: Math.round(usage.today * 1000) / 1000,
      dailyQuotaSeconds: this.#prefs.dailyQuotaSeconds,
      trust: saved.trust, clientId: saved.clientId, tasks: { ...this.#counts },
      error: this.#error,
    };
  }

  #show(state, reason, resumeAtMs) {
    this.#status = { state, reason, resumeAtMs };
    this.#emit();
  }

  /** Tell the listeners when the status (its counts and use read again) changed; a later
   *  resumeAtMs alone is no change. */
  #emit() {
    const status = this.status();
    const shown = JSON.stringify({ ...status, resumeAtMs: null });
    if (shown === this.#shown) return;
    this.#shown = shown;
    this.dispatchEvent(new CustomEvent("status", { detail: status }));
    if (this.#onStatus) {
      try {
        this.#onStatus(status);
      } catch (e) {
        console.warn("amelio: onStatus failed", e);
      }
    }
  }
}

