// amelio.js: the browser client of Amelio (docs/client.md).
//
// One ES module, no build step, no dependency. A search page binds each rendered
// result list to the search response it came from; the client turns what the person
// then does into MartyFeedbackEventV1 events (GET /v1/feedback/schema) and sends
// them to POST /v1/feedback/events in batches, only with consent. With a consent of
// its own, it also lends the browser's idle time to the server (`amelio.compute`:
// MartyContributionV1 tasks run in amelio-embed-worker.js).
//
//   import { Amelio } from "https://amelio.example.com/static/amelio.js";
//   const amelio = Amelio.init({ endpoint: "https://amelio.example.com", key: "amk_…",
//                                consent: "unknown" });
//   amelio.track(searchResponse, document.querySelectorAll("#results > li"));
//   amelio.setConsent("granted");   // from the page's consent banner
//
// Types: amelio.d.ts beside this file.

/** @typedef {"granted" | "denied" | "unknown"} Consent */
/** @typedef {"up" | "down"} VoteDirection */

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
 * @property {ComputeOptions} [compute] Idle compute (docs/client.md#idle-compute); nothing
 *   runs before the person grants its own consent (`compute.setConsent`).
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
const CONSENTS = ["granted", "denied", "unknown"];
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
function storage(kind = "sessionStorage") {
  try {
    return window[kind];
  } catch {
    return null; // disabled, or a sandboxed frame
  }
}

/** The JSON value `store` keeps under `key`, or null (none, unreadable, or no store). */
function readJson(store, key) {
  try {
    return store ? JSON.parse(store.getItem(key) || "null") : null;
  } catch {
    return null;
  }
}

/** Keep `value` as JSON under `key`; false when there is no store, or it is full or refused. */
function writeJson(store, key, value) {
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
async function retryAfterMs(response) {
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
function backoffMs(attempt, maxMs) {
  const base = Math.min(maxMs, 1000 * 2 ** (attempt - 1));
  return base / 2 + Math.random() * (base / 2);
}

/**
 * An error answer's `{code, message}` (Amelio's `{"error": {...}}` body).
 * @param {Response} response
 * @param {string} [fallback] the message when the body has none
 */
async function errorOf(response, fallback = `answered ${response.status}`) {
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
    /**
     * Idle compute (docs/client.md#idle-compute): separate consent, off until started.
     * @readonly
     */
    this.compute = new ComputeController(this, o.compute || {});
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

  /**
   * Render the person's idle-compute settings into `el`: consent, intensity, time window,
   * daily quota, device tier, CPU used and budget, status (see `settingsPanel()`).
   * @param {Element} el
   * @returns {{element: HTMLElement, refresh: () => void, destroy: () => void}}
   */
  settingsPanel(el) {
    return settingsPanel(this.compute, el);
  }

  /** Remove every listener and stop idle compute (a single-page app tearing its view down). */
  destroy() {
    this.compute.stop();
    for (const off of [...this._unbind, ...this._listeners]) off();
    this._unbind = [];
    this._listeners = [];
    clearTimeout(this._timer);
  }
}

// -- idle compute (MartyContributionV1, docs/client.md#idle-compute) ---------------------
//
// With the person's consent, and only while they are not using the page, a Web Worker
// computes what the server would otherwise compute itself (today: the search index's
// document embeddings), leased from GET /v1/contributions/tasks and sent back to
// POST /v1/contributions. The server accepts a result only when a second client or its
// own spot-check agrees.

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
 * @property {string|URL} [workerUrl] The embedding worker (default
 *   `amelio-embed-worker.js` beside amelio.js).
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
 * @property {string|null} reason Why it waits: "consent", "intensity", "starting",
 *   "battery", "tier", "window", "quota", "budget", "active" (the person uses the page),
 *   "no-tasks", "server" (429/5xx), "offline", "error", "other-tab".
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

const TASK_LABELS = Object.freeze({
  "embed_documents:search_index": "Compute search-index embeddings of documents",
});
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
 * @param {Partial<ComputePreferences> & {intensity?: number|string}} changes
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
    this.#workerUrl = new URL(String(o.workerUrl || new URL("./amelio-embed-worker.js",
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
   * @param {Partial<ComputePreferences> & {intensity?: number|string}} changes
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

// -- the settings panel -----------------------------------------------------------------

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
 * @returns {{element: HTMLElement, refresh: () => void, destroy: () => void}}
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

export const Amelio = {
  VERSION,
  /**
   * @param {InitOptions} options
   * @returns {AmelioClient}
   */
  init(options) {
    return new AmelioClient(options);
  },
};

export default Amelio;
