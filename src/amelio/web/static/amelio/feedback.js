// amelio/feedback.js: the feedback client of Amelio (docs/client.md), which the entry
// module amelio.js re-exports.
//
// A search page binds each rendered result list to the search response it came from;
// the client turns what the person then does into MartyFeedbackEventV1 events
// (GET /v1/feedback/schema) and sends them to POST /v1/feedback/events in batches, only
// with consent. Idle compute (compute.js) and its settings panel (panel.js) are other
// modules, imported with import() the first time the page asks for them, so a page that
// only sends feedback never downloads them. They share this module's plumbing (storage,
// back-off, error bodies), exported for them; the public API is what amelio.js exports.

/** @typedef {"granted" | "denied" | "unknown"} Consent */
/** @typedef {"up" | "down"} VoteDirection */
/** @typedef {import("./compute.js").ComputeController} ComputeController */
/** @typedef {import("./compute.js").ComputeOptions} ComputeOptions */
/** @typedef {import("./panel.js").SettingsPanel} SettingsPanel */

/**
 * What `POST /v1/search` answers (docs/search.md); only these fields are read.
 * @typedef {Object} SearchResponse
 * @property {string} queryId
 * @property {string} requestId
 * @property {string} feedbackToken
 * @property {string} [rankProfile]
 * @property {number} [alpha]
 * @property {{docId: string, rank?: number}[]} results
 */

/**
 * @typedef {Object} InitOptions
 * @property {string} endpoint Amelio's base URL, e.g. "https://amelio.example.com".
 * @property {string} key A `client` API key (it can only send feedback events).
 * @property {string} [project] The project the searches ran in; it namespaces what the
 *   client keeps in sessionStorage. Events carry no project (the schema has none: the
 *   server knows a query's project from its queryId).
 * @property {Consent} [consent] The person's choice so far (default "unknown": nothing
 *   is sent until setConsent("granted")).
 * @property {string} [userId] A user id, sent as `session.userId` (the server stores only
 *   its daily-salted hash). Omit it and no user id leaves the page.
 * @property {string} [locale] Sent as `session.locale` (e.g. "fr"); default none.
 * @property {boolean} [respectDoNotTrack] Treat `navigator.doNotTrack === "1"` as
 *   "denied" (default true).
 * @property {boolean} [respectGlobalPrivacyControl] Treat
 *   `navigator.globalPrivacyControl === true` as "denied" (default true).
 * @property {number} [flushIntervalMs] Send queued events at most this long after the
 *   first of them was queued (default 5000).
 * @property {number} [maxBatch] Most events per request (default 500, the collector's
 *   feedback_max_events).
 * @property {number} [maxQueue] Most events kept while they cannot be sent (offline,
 *   backing off); beyond, the oldest are dropped and counted (default 1000).
 * @property {number} [maxDwellMs] A longer absence is sent as this dwell (default 30 min).
 * @property {string} [branch] `request.branch` of votes (default "search").
 * @property {Object<string, unknown>|null} [context] The events' `context` section
 *   (routeId, view, …); default `{routeId: location.pathname}`, null for none.
 * @property {(error: AmelioError) => void} [onError] Called when events are refused or
 *   a request fails for good, and on idle-compute errors (default: console.warn).
 * @property {ComputeOptions} [compute] Idle compute (docs/client.md#idle-compute): given,
 *   the page asks for it, and compute.js starts loading at once; nothing runs before the
 *   person grants its own consent (`compute.setConsent`).
 */

/**
 * @typedef {Object} TrackOptions
 * @property {string} [query] The query's text: with it, the next query of the tab
 *   session is compared with this one to report a reformulation.
 */

/**
 * @typedef {Object} AmelioError
 * @property {string} message
 * @property {number} [status] The HTTP status, when there was an answer.
 * @property {Object[]} [events] The collector's statuses of the refused events.
 */

/**
 * Counters since init; `discarded` are events not made for want of consent.
 * @typedef {Object} AmelioStats
 * @property {number} queued
 * @property {number} accepted
 * @property {number} duplicate
 * @property {number} rejected
 * @property {number} droppedByServer
 * @property {number} dropped Events dropped from a full queue (oldest first).
 * @property {number} discarded
 * @property {number} retries
 * @property {number} requests
 * @property {number} beacons
 */

/** The aggregator's windows (src/amelio/search/aggregation.py), for the docs' sake. */
export const REFORMULATION_WINDOW_MS = 30_000;
export const REFORMULATION_SIMILARITY = 0.6;
/** A dwell under this is a bounce for the server (it classifies; the client only measures). */
export const DWELL_POSITIVE_MS = 8000;
export const VERSION = "1";

const B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const BEACON_BYTES = 60_000; // browsers allow 64 KiB of beacon/keepalive bodies in flight
const MAX_BACKOFF_MS = 60_000;
const EVENTS_PATH = "/v1/feedback/events";
export const CONSENTS = Object.freeze(["granted", "denied", "unknown"]);
const LOCALE = /^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$/;

/** A ULID: 48 bits of milliseconds, then 80 random bits, Crockford base32. */
function ulid(now = Date.now()) {
  let time = "";
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = B32[t % 32] + time;
    t = Math.floor(t / 32);
  }
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let random = "";
  for (const b of bytes) random += B32[b & 31];
  return time + random;
}

function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Folded words joined by spaces, as the server normalizes queries (amelio.text). */
export function normalizeQuery(text) {
  const folded = String(text).normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();
  return (folded.match(/[\p{L}\p{N}]+(?:['’][\p{L}\p{N}]+)*/gu) || []).join(" ");
}

/** Python's difflib.SequenceMatcher(None, a, b).ratio() for short texts (no autojunk). */
export function similarity(a, b) {
  a = a.slice(0, 199);
  b = b.slice(0, 199);
  if (!a.length && !b.length) return 1;
  let matched = 0;
  const todo = [[0, a.length, 0, b.length]];
  while (todo.length) {
    const [alo, ahi, blo, bhi] = todo.pop();
    let besti = alo, bestj = blo, size = 0;
    let runs = new Map();
    for (let i = alo; i < ahi; i++) {
      const next = new Map();
      for (let j = blo; j < bhi; j++) {
        if (a[i] !== b[j]) continue;
        const k = (runs.get(j - 1) || 0) + 1;
        next.set(j, k);
        if (k > size) [besti, bestj, size] = [i - k + 1, j - k + 1, k];
      }
      runs = next;
    }
    if (!size) continue;
    matched += size;
    if (alo < besti && blo < bestj) todo.push([alo, besti, blo, bestj]);
    if (besti + size < ahi && bestj + size < bhi) todo.push([besti + size, ahi, bestj + size, bhi]);
  }
  return (2 * matched) / (a.length + b.length);
}

/**
 * The tab session's store (sessionStorage: the feedback client) or the browser's
 * (localStorage: idle compute), or null.
 * @param {"sessionStorage" | "localStorage"} [kind]
 * @returns {Storage|null}
 */
export function storage(kind = "sessionStorage") {
  try {
    return window[kind];
  } catch {
    return null; // disabled, or a sandboxed frame
  }
}

/** The JSON value `store` keeps under `key`, or null (none, unreadable, or no store). */
export function readJson(store, key) {
  try {
    return store ? JSON.parse(store.getItem(key) || "null") : null;
  } catch {
    return null;
  }
}

/** Keep `value` as JSON under `key`; false when there is no store, or it is full or refused. */
export function writeJson(store, key, value) {
  if (!store) return false;
  try {
    store.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

/**
 * The wait a 429 or 503 asks for, or 0. Retry-After is readable cross-origin because
 * the server exposes it (CORS); the error body says the same (details.retryAfter) in
 * case a proxy hid it.
 * @param {Response|null} response
 * @returns {Promise<number>} milliseconds
 */
export async function retryAfterMs(response) {
  if (!response) return 0;
  const header = response.headers.get("Retry-After");
  if (header) {
    return /^\d+$/.test(header.trim()) ? Number(header) * 1000
      : Math.max(0, Date.parse(header) - Date.now()) || 0;
  }
  const body = await response.clone().json().catch(() => null);
  const seconds = Number(body && body.error && body.error.details && body.error.details.retryAfter);
  return seconds > 0 ? seconds * 1000 : 0;
}

/** Exponential back-off with jitter: 1 s, 2 s, 4 s … up to `maxMs`, half to all of it. */
export function backoffMs(attempt, maxMs) {
  const base = Math.min(maxMs, 1000 * 2 ** (attempt - 1));
  return base / 2 + Math.random() * (base / 2);
}

/**
 * An error answer's `{code, message}` (Amelio's `{"error": {...}}` body).
 * @param {Response} response
 * @param {string} [fallback] the message when the body has none
 */
export async function errorOf(response, fallback = `answered ${response.status}`) {
  const body = await response.json().catch(() => null);
  const error = (body && body.error) || {};
  return { code: String(error.code || ""), message: String(error.message || fallback) };
}

/** The feedback client; make one with `Amelio.init(options)`. */
export class AmelioClient {
  /** @param {InitOptions} options */
  constructor(options) {
    if (!options || !options.endpoint || !options.key) {
      throw new TypeError("Amelio.init needs {endpoint, key}: Amelio's URL and a client key.");
    }
    const o = options;
    /** @readonly */ this.endpoint = String(o.endpoint).replace(/\/+$/, "");
    /** @readonly */ this.project = o.project || "default";
    this._key = String(o.key);
    this._consent = /** @type {Consent} */ (o.consent || "unknown");
    if (!CONSENTS.includes(this._consent)) {
      throw new TypeError(`consent is "granted", "denied" or "unknown", not ${o.consent}`);
    }
    this._userId = o.userId == null ? null : String(o.userId);
    this._locale = o.locale && LOCALE.test(o.locale) && o.locale.length <= 35 ? o.locale : null;
    this._flushMs = o.flushIntervalMs ?? 5000;
    this._maxBatch = Math.max(1, Math.min(o.maxBatch ?? 500, 500));
    this._maxQueue = Math.max(1, o.maxQueue ?? 1000);
    this._maxDwell = o.maxDwellMs ?? 30 * 60_000;
    this._branch = o.branch || "search";
    this._context = o.context === undefined
      ? { routeId: location.pathname.slice(0, 200) } : o.context;
    this._onError = o.onError || ((e) => console.warn("amelio:", e.message, e));
    /** Why consent is denied whatever the page says, or null. */
    this._blockedBy = null;
    const nav = /** @type {any} */ (navigator);
    if (o.respectGlobalPrivacyControl !== false && nav.globalPrivacyControl === true) {
      this._blockedBy = "globalPrivacyControl";
    } else if (o.respectDoNotTrack !== false && nav.doNotTrack === "1") {
      this._blockedBy = "doNotTrack";
    }
    /** @type {AmelioStats} */
    this.stats = { queued: 0, accepted: 0, duplicate: 0, rejected: 0, droppedByServer: 0,
                   dropped: 0, discarded: 0, retries: 0, requests: 0, beacons: 0 };
    this._prefix = `amelio:${this.project}:`;
    this._page = randomId(); // this page instance: who recorded a leave
    this._queue = [];
    this._inflight = null; // {ids: Set, keepalive: boolean}
    this._timer = 0;
    this._attempt = 0;
    this._waitingUntil = 0;
    /** queryId -> the query as tracked on this page */
    this._queries = new Map();
    this._current = null;
    this._unbind = [];
    this._listeners = [];
    this._listen(document, "visibilitychange", () => this._onVisibility());
    this._listen(window, "pagehide", () => this._onPageHide());
    this._listen(window, "pageshow", (e) => this._onPageShow(/** @type {PageTransitionEvent} */ (e)));
    this._listen(window, "online", () => this._schedule(0));
    if (this._granted()) this._restoreQueue();
    this._computeOptions = o.compute || {};
    /** @type {ComputeController|null} */
    this._compute = null;
    /** @type {Promise<ComputeController>|null} */
    this._computeLoading = null;
    this._destroyed = false;
    if (o.compute) {
      this.loadCompute().catch((e) => this._onError({ message: `compute: ${e.message}` }));
    }
  }

  // -- consent ----------------------------------------------------------------------

  /** The consent in force: "denied" under Do Not Track or GPC (unless the page opted out). */
  get consent() {
    return this._blockedBy ? "denied" : this._consent;
  }

  /** Why events are refused whatever the page says: "doNotTrack", "globalPrivacyControl" or null. */
  get blockedBy() {
    return this._blockedBy;
  }

  /**
   * Record the person's choice. "granted" starts sending (events from before were
   * discarded, not kept); "denied" or "unknown" stops, empties the queue and forgets
   * what the tab session kept (its session id included).
   * @param {Consent} consent
   */
  setConsent(consent) {
    if (!CONSENTS.includes(consent)) {
      throw new TypeError(`consent is "granted", "denied" or "unknown", not ${consent}`);
    }
    this._consent = consent;
    if (!this._granted()) this._forget();
  }

  /** @param {string|null} userId sent as session.userId (hashed by the server); null: none */
  setUser(userId) {
    this._userId = userId == null ? null : String(userId);
  }

  /**
   * The tab session's random id (sessionStorage), to pass as `sessionId` to
   * `POST /v1/search` so searches and events join; null without consent.
   * @returns {string|null}
   */
  get sessionId() {
    if (!this._granted()) return null;
    const store = storage();
    if (!this._sid) this._sid = (store && store.getItem("amelio:sid")) || randomId();
    try {
      if (store) store.setItem("amelio:sid", this._sid);
    } catch {
      // full or refused: the id lives as long as the page
    }
    return this._sid;
  }

  _granted() {
    return !this._blockedBy && this._consent === "granted";
  }

  _forget() {
    this._queue = [];
    this._inflight = null;
    clearTimeout(this._timer);
    this._timer = 0;
    this._sid = null;
    this._memory = null;
    const store = storage();
    if (!store) return;
    for (const name of ["amelio:sid", this._prefix + "state", this._prefix + "queue"]) {
      store.removeItem(name);
    }
  }

  // -- results ----------------------------------------------------------------------

  /**
   * Bind a rendered result list to the search response it came from. `elements` are
   * one per result in rank order, or carry `data-doc-id`. Clicks on a link inside an
   * element (or on the element, when it holds no link) are result clicks; anything
   * inside `[data-amelio-ignore]` is not (vote buttons, say).
   * @param {SearchResponse} response
   * @param {Iterable<Element>|ArrayLike<Element>} elements
   * @param {TrackOptions} [options]
   */
  track(response, elements, options = {}) {
    if (!response || !response.queryId || !response.feedbackToken
        || !Array.isArray(response.results)) {
      throw new TypeError("track() needs a POST /v1/search response "
                          + "(queryId, requestId, feedbackToken, results).");
    }
    const now = Date.now();
    const ranks = new Map();
    response.results.forEach((r, i) => ranks.set(String(r.docId), r.rank || i + 1));
    const q = {
      queryId: response.queryId, requestId: response.requestId, token: response.feedbackToken,
      rankProfile: response.rankProfile, alpha: response.alpha, ranks, shownAt: now,
      query: options.query == null ? null : normalizeQuery(options.query),
      clicked: new Set(),
    };
    this._queries.set(q.queryId, q);
    if (this._queries.size > 50) this._queries.delete(this._queries.keys().next().value);
    this._current = q;
    for (const off of this._unbind) off();
    this._unbind = [];
    Array.from(elements).forEach((el, i) => {
      const docId = el.getAttribute("data-doc-id") || (response.results[i] || {}).docId;
      if (docId == null || !ranks.has(String(docId))) return;
      const onClick = (e) => this._onClick(q, String(docId), e);
      el.addEventListener("click", onClick);
      el.addEventListener("auxclick", onClick);
      this._unbind.push(() => {
        el.removeEventListener("click", onClick);
        el.removeEventListener("auxclick", onClick);
      });
    });
    if (!this._granted()) return;
    const state = this._state();
    this._finishDwell(state, now); // back on a results page: the absence ends here
    const last = state.last;
    if (last && last.queryId !== q.queryId) {
      if (!last.clicked && !last.abandoned) {
        this._emit("query_abandoned", last, {});
      }
      if (last.query && q.query && last.query !== q.query
          && now - last.shownAt <= REFORMULATION_WINDOW_MS
          && similarity(last.query, q.query) >= REFORMULATION_SIMILARITY) {
        this._emit("query_reformulated", last, { outcome: { reformulatedAfter: true } });
      }
    }
    if (!last || last.queryId !== q.queryId) {
      state.last = { ...this._ref(q), query: q.query, shownAt: now, clicked: false,
                     abandoned: false };
    }
    this._save(state);
  }

  /**
   * 👍 or 👎 on a shown result (vote_up / vote_down, score 1).
   * @param {string} docId
   * @param {VoteDirection} direction
   * @param {{comment?: string, queryId?: string}} [options]
   * @returns {boolean} whether an event was queued
   */
  vote(docId, direction, options = {}) {
    if (direction !== "up" && direction !== "down") {
      throw new TypeError(`vote() takes "up" or "down", not ${direction}`);
    }
    const vote = { score: 1 };
    if (options.comment) vote.comment = String(options.comment).slice(0, 2000);
    return this._explicit(`vote_${direction}`, docId, options.queryId, { vote });
  }

  /**
   * Pin a shown result as relevant (result_pinned).
   * @param {string} docId
   * @param {{queryId?: string}} [options]
   */
  pin(docId, options = {}) {
    return this._explicit("result_pinned", docId, options.queryId, {});
  }

  /**
   * Hide a shown result (result_hidden), with an optional reason.
   * @param {string} docId
   * @param {string} [reason]
   * @param {{queryId?: string}} [options]
   */
  hide(docId, reason, options = {}) {
    const extra = reason ? { hide: { reason: String(reason).slice(0, 500) } } : {};
    return this._explicit("result_hidden", docId, options.queryId, extra);
  }

  _explicit(type, docId, queryId, extra) {
    docId = String(docId);
    let q = queryId ? this._queries.get(queryId) : null;
    if (!q) {
      q = [...this._queries.values()].reverse().find((x) => x.ranks.has(docId)) || null;
    }
    if (!q || !q.ranks.has(docId)) {
      this._onError({ message: `${type}: ${docId} is not a result of a tracked query` });
      return false;
    }
    const request = type.startsWith("vote_") ? { branch: this._branch } : {};
    return this._emit(type, this._ref(q), {
      result: { docId, rankShown: q.ranks.get(docId) }, ...extra,
    }, request);
  }

  // -- clicks and dwell ---------------------------------------------------------------

  _onClick(q, docId, e) {
    if (e.type === "auxclick" && e.button !== 1) return; // middle click opens a tab
    const target = /** @type {Element|null} */ (e.target instanceof Element ? e.target : null);
    const el = /** @type {Element} */ (e.currentTarget);
    if (target && target.closest("[data-amelio-ignore]")) return;
    if (el.querySelector("a[href]") && !(target && target.closest("a[href]"))) return;
    if (!this._granted()) {
      this.stats.discarded++;
      return;
    }
    const rank = q.ranks.get(docId);
    if (!q.clicked.has(docId)) {
      q.clicked.add(docId);
      this._emit("result_clicked", this._ref(q), { result: { docId, rankShown: rank } });
    }
    const state = this._state();
    if (state.last && state.last.queryId === q.queryId) state.last.clicked = true;
    state.pending = { ...this._ref(q), docId, rank, clickedAt: Date.now(), leftAt: null,
                      page: null };
    if (document.visibilityState === "hidden") {
      state.pending.leftAt = Date.now();
      state.pending.page = this._page;
    }
    this._save(state);
  }

  /** The person is back on the results: the dwell of the last click left is over. */
  _finishDwell(state, now) {
    const p = state.pending;
    state.pending = null;
    if (!p || p.leftAt == null) return; // clicked without leaving: no absence to measure
    const dwellMs = Math.max(0, Math.min(now - p.leftAt, this._maxDwell, 7 * 86_400_000));
    this._emit("result_dwell_time", p, {
      result: { docId: p.docId, rankShown: p.rank }, outcome: { dwellMs: Math.round(dwellMs) },
    });
  }

  _onVisibility() {
    if (!this._granted()) return;
    const now = Date.now();
    const state = this._state();
    if (document.visibilityState === "hidden") {
      if (state.pending && state.pending.leftAt == null) {
        state.pending.leftAt = now;
        state.pending.page = this._page;
        this._save(state);
      }
      this.flush({ keepalive: true });
    } else if (this._current && state.pending && state.pending.leftAt != null) {
      this._finishDwell(state, now);
      this._save(state);
    }
  }

  _onPageShow(e) {
    if (!e.persisted || !this._granted() || !this._current) return;
    const state = this._state(); // back from the back/forward cache
    if (state.pending && state.pending.leftAt != null) {
      this._finishDwell(state, Date.now());
      this._save(state);
    }
  }

  _onPageHide() {
    if (!this._granted()) return;
    const now = Date.now();
    const state = this._state();
    const p = state.pending;
    if (p && p.leftAt == null) {
      p.leftAt = now; // leaving in this tab, most likely for the clicked result
      p.page = this._page;
    } else if (p && p.page === this._page && document.visibilityState === "hidden") {
      this._finishDwell(state, now); // the results page closes while the person is away
    }
    const last = state.last;
    if (this._current && last && last.queryId === this._current.queryId
        && !last.clicked && !last.abandoned) {
      last.abandoned = true; // results shown, nothing clicked, and the page goes
      this._emit("query_abandoned", last, {});
    }
    this._save(state);
    this._beacon();
  }

  // -- events -------------------------------------------------------------------------

  _ref(q) {
    /** @type {Record<string, any>} */
    const ref = { queryId: q.queryId, requestId: q.requestId, token: q.token };
    if (q.rankProfile) ref.rankProfile = q.rankProfile;
    if (typeof q.alpha === "number") ref.alpha = q.alpha;
    return ref;
  }

  _emit(type, ref, sections, extraRequest = {}) {
    if (!this._granted()) {
      this.stats.discarded++;
      return false;
    }
    /** @type {Record<string, unknown>} */
    const request = { queryId: ref.queryId, feedbackToken: ref.token, ...extraRequest };
    if (ref.requestId) request.requestId = ref.requestId;
    if (ref.rankProfile && /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/.test(ref.rankProfile)) {
      request.rankProfile = ref.rankProfile;
    }
    if (typeof ref.alpha === "number" && ref.alpha >= 0 && ref.alpha <= 1) {
      request.alpha = ref.alpha;
    }
    const session = { sessionId: /** @type {string} */ (this.sessionId) };
    if (this._userId) session.userId = this._userId.slice(0, 200);
    if (this._locale) session.locale = this._locale;
    const now = Date.now();
    const event = { eventVersion: "v1", eventId: ulid(now), eventTimeMs: now,
                    eventType: type, session, request, ...sections,
                    consent: { telemetry: "granted" } };
    if (this._context) event.context = this._context;
    this._queue.push(event);
    this.stats.queued++;
    while (this._queue.length > this._maxQueue) {
      this._queue.shift();
      this.stats.dropped++;
    }
    this._schedule(this._queue.length >= this._maxBatch ? 0 : this._flushMs);
    return true;
  }

  // -- sending ------------------------------------------------------------------------

  /** Events waiting to be sent (a copy). */
  get pending() {
    return this._queue.slice();
  }

  _schedule(delayMs) {
    if (!this._queue.length || this._inflight) return;
    const at = Math.max(Date.now() + delayMs, this._waitingUntil);
    if (this._timer && this._timerAt <= at) return;
    clearTimeout(this._timer);
    this._timerAt = at;
    this._timer = setTimeout(() => {
      this._timer = 0;
      this.flush();
    }, at - Date.now());
  }

  /**
   * Send what is queued now, a batch at a time (the queue keeps what could not go).
   * @param {{keepalive?: boolean}} [options] keepalive: the request may outlive the page
   * @returns {Promise<void>}
   */
  async flush(options = {}) {
    if (this._inflight || !this._queue.length || !this._granted()) return;
    if (Date.now() < this._waitingUntil) return this._schedule(0);
    if (navigator.onLine === false) return; // the "online" event resumes
    clearTimeout(this._timer);
    this._timer = 0;
    const batch = this._queue.slice(0, this._maxBatch);
    const body = JSON.stringify(batch);
    const keepalive = !!options.keepalive && body.length < BEACON_BYTES;
    const inflight = { ids: new Set(batch.map((e) => e.eventId)), keepalive };
    this._inflight = inflight;
    this.stats.requests++;
    let response = null;
    try {
      response = await fetch(this.endpoint + EVENTS_PATH, {
        method: "POST", body, keepalive, mode: "cors", credentials: "omit",
        headers: this._headers(true),
      });
    } catch {
      response = null; // offline, refused, or blocked by CORS: back off and retry
    }
    if (this._inflight !== inflight) return; // consent withdrawn meanwhile
    this._inflight = null;
    if (response && response.status === 202) {
      this._attempt = 0;
      this._done(inflight.ids);
      this._tally(await response.json().catch(() => null));
      this._schedule(this._queue.length >= this._maxBatch ? 0 : this._flushMs);
    } else if (!response || response.status === 429 || response.status >= 500) {
      this._retry(response);
    } else if (response.status === 413 && batch.length > 1) {
      this._maxBatch = Math.max(1, Math.floor(batch.length / 2));
      this._schedule(0);
    } else {
      this._done(inflight.ids);
      this.stats.rejected += batch.length;
      const error = await errorOf(response, `the collector answered ${response.status}`);
      this._onError({ message: error.message, status: response.status });
      this._schedule(this._flushMs);
    }
  }

  /** The client key's headers (idle compute sends them too), with a JSON body or none. */
  _headers(json = false) {
    /** @type {Record<string, string>} */
    const headers = { Authorization: `Bearer ${this._key}` };
    if (json) headers["Content-Type"] = "application/json";
    return headers;
  }

  _done(ids) {
    this._queue = this._queue.filter((e) => !ids.has(e.eventId));
  }

  _tally(answer) {
    if (!answer) return;
    this.stats.accepted += answer.accepted || 0;
    this.stats.duplicate += answer.duplicate || 0;
    this.stats.rejected += answer.rejected || 0;
    this.stats.droppedByServer += answer.dropped || 0;
    if (answer.rejected) {
      const events = (answer.events || []).filter((e) => e.status === "rejected");
      this._onError({ message: `${answer.rejected} event(s) rejected: `
                        + events.slice(0, 3).map((e) => `${e.field}: ${e.reason}`).join("; "),
                      status: 202, events });
    }
  }

  async _retry(response) {
    this.stats.retries++;
    this._attempt++;
    const asked = response && response.status === 429 ? await retryAfterMs(response) : 0;
    this._waitingUntil = Date.now() + (asked || backoffMs(this._attempt, MAX_BACKOFF_MS));
    this._schedule(0);
  }

  /** The page goes: what is queued leaves with sendBeacon (no header: the key in ?key=). */
  _beacon() {
    clearTimeout(this._timer);
    this._timer = 0;
    const kept = this._inflight && this._inflight.keepalive ? this._inflight.ids : new Set();
    const events = this._queue.filter((e) => !kept.has(e.eventId));
    const url = `${this.endpoint}${EVENTS_PATH}?key=${encodeURIComponent(this._key)}`;
    let start = 0;
    while (start < events.length && typeof navigator.sendBeacon === "function") {
      let end = start;
      let size = 0;
      const lines = [];
      while (end < events.length && end - start < this._maxBatch) {
        const line = JSON.stringify(events[end]);
        if (lines.length && size + line.length + 1 > BEACON_BYTES) break;
        lines.push(line);
        size += line.length + 1;
        end++;
      }
      // A string body goes as text/plain: a CORS-safelisted type, so no preflight.
      if (!navigator.sendBeacon(url, lines.join("\n"))) break;
      this.stats.beacons++;
      start = end;
    }
    // Backing off (a 429, a 5xx), the beacon may well be refused too: the next page of
    // the tab gets a copy as well (a resent eventId is only a "duplicate").
    const left = Date.now() < this._waitingUntil ? events : events.slice(start);
    this._queue = this._inflight && this._inflight.keepalive
      ? this._queue.filter((e) => kept.has(e.eventId)) : [];
    const store = storage();
    if (store && left.length // the next page of the tab session sends them
        && !writeJson(store, this._prefix + "queue", left.slice(-this._maxQueue))) {
      this.stats.dropped += left.length;
    }
  }

  _restoreQueue() {
    const store = storage();
    const saved = store && store.getItem(this._prefix + "queue");
    if (!saved) return;
    store.removeItem(this._prefix + "queue");
    try {
      this._queue = JSON.parse(saved).concat(this._queue).slice(-this._maxQueue);
    } catch {
      return;
    }
    this._schedule(0);
  }

  // -- the tab session's state (sessionStorage, only with consent) ----------------------

  _state() {
    if (this._memory) {
      return this._memory; // sessionStorage refused a write: this page keeps its own
    }
    return readJson(storage(), this._prefix + "state") || { last: null, pending: null };
  }

  _save(state) {
    if (!this._granted()) return;
    if (!writeJson(storage(), this._prefix + "state", state)) this._memory = state;
  }

  // -- lifecycle ----------------------------------------------------------------------

  _listen(target, type, handler) {
    target.addEventListener(type, handler);
    this._listeners.push(() => target.removeEventListener(type, handler));
  }

  // -- idle compute: modules of their own, loaded when the page asks -------------------

  /**
   * Idle compute's controller (docs/client.md#idle-compute) once `loadCompute()` made it;
   * null before.
   * @returns {ComputeController|null}
   */
  get compute() {
    return this._compute;
  }

  /**
   * Idle compute's controller, made with the init option `compute`; the first call
   * imports compute.js, later ones answer the same controller. Why a promise: a page
   * that only sends feedback must not download the compute code, so it comes on demand.
   * @returns {Promise<ComputeController>}
   */
  loadCompute() {
    if (!this._computeLoading) {
      this._computeLoading = import("./compute.js").then(({ ComputeController }) => {
        if (!this._compute) {
          const options = { ...this._computeOptions };
          if (this._destroyed) options.enabled = false; // torn down while it loaded
          this._compute = new ComputeController(this, options);
        }
        return this._compute;
      }, (e) => {
        this._computeLoading = null; // a later call tries again (the network may be back)
        throw new Error(`could not load compute.js: ${e && e.message || e}`);
      });
    }
    return this._computeLoading;
  }

  /**
   * Render the person's idle-compute settings into `el` (see panel.js `settingsPanel()`):
   * consent, intensity, time window, daily quota, device tier, CPU used and budget,
   * status. Loads compute.js and panel.js the first time.
   * @param {Element} el
   * @returns {Promise<SettingsPanel>}
   */
  async settingsPanel(el) {
    const [compute, panel] = await Promise.all([this.loadCompute(), import("./panel.js")]);
    return panel.settingsPanel(compute, el);
  }

  /** Remove every listener and stop idle compute (a single-page app tearing its view down). */
  destroy() {
    this._destroyed = true;
    if (this._compute) this._compute.stop();
    for (const off of [...this._unbind, ...this._listeners]) off();
    this._unbind = [];
    this._listeners = [];
    clearTimeout(this._timer);
  }
}

