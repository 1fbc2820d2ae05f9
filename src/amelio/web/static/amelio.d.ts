// Types of amelio.js, Amelio's browser client (docs/client.md): what the entry module
// exports (the feedback client, amelio/feedback.js). Idle compute and its settings
// panel, imported on demand, have theirs beside them (amelio/compute.d.ts,
// amelio/panel.d.ts). Hand-written, since the modules need no build step; the names,
// members and parameters are checked against the JSDoc by tests/test_web_client_types.py.

import type { ComputeController, ComputeOptions, DeviceTier } from "./amelio/compute.js";
import type { SettingsPanel } from "./amelio/panel.js";

export type { ComputeController, ComputeOptions, SettingsPanel };

export type Consent = "granted" | "denied" | "unknown";
export type VoteDirection = "up" | "down";

/** What `POST /v1/search` answers (docs/search.md); only these fields are read. */
export interface SearchResponse {
  queryId: string;
  requestId: string;
  feedbackToken: string;
  rankProfile?: string;
  alpha?: number;
  results: ReadonlyArray<{ docId: string; rank?: number; [field: string]: unknown }>;
  [field: string]: unknown;
}

export interface InitOptions {
  /** Amelio's base URL, e.g. "https://amelio.example.com". */
  endpoint: string;
  /** A `client` API key: it can only send feedback events. */
  key: string;
  /** The project the searches ran in; namespaces what the client keeps in sessionStorage. */
  project?: string;
  /** The person's choice so far; default "unknown" (nothing is sent). */
  consent?: Consent;
  /** Sent as `session.userId`; the server stores only its daily-salted hash. */
  userId?: string;
  /** Sent as `session.locale`, e.g. "fr" or "en-GB". */
  locale?: string;
  /** Treat `navigator.doNotTrack === "1"` as denied (default true). */
  respectDoNotTrack?: boolean;
  /** Treat `navigator.globalPrivacyControl === true` as denied (default true). */
  respectGlobalPrivacyControl?: boolean;
  /** Send queued events at most this long after the first was queued (default 5000). */
  flushIntervalMs?: number;
  /** Most events per request (default and maximum 500). */
  maxBatch?: number;
  /** Most events kept while they cannot be sent; the oldest go first (default 1000). */
  maxQueue?: number;
  /** A longer absence is sent as this dwell (default 1,800,000: 30 minutes). */
  maxDwellMs?: number;
  /** `request.branch` of votes (default "search"). */
  branch?: string;
  /** The events' `context` section; default `{routeId: location.pathname}`, null for none. */
  context?: {
    routeId?: string;
    view?: string;
    embed?: boolean;
    filtersFingerprint?: string;
    deviceTier?: DeviceTier;
  } | null;
  /** Refused events, failed requests and idle-compute errors (default: console.warn). */
  onError?: (error: AmelioError) => void;
  /** Idle compute (docs/client.md#idle-compute): given, the page asks for it and
   *  amelio/compute.js starts loading at once. Nothing runs before the person grants its
   *  own consent (`compute.setConsent("granted")` or the settings panel). */
  compute?: ComputeOptions;
}

export interface TrackOptions {
  /** The query's text: the next query of the tab session is compared with it. */
  query?: string;
}

export interface AmelioError {
  message: string;
  /** The HTTP status, when there was an answer. */
  status?: number;
  /** The collector's statuses of the refused events. */
  events?: ReadonlyArray<{ index: number; eventId: string | null; status: string;
                           field?: string; reason?: string }>;
}

export interface AmelioStats {
  queued: number;
  accepted: number;
  duplicate: number;
  rejected: number;
  /** Events the server dropped for want of consent (none, from this client). */
  droppedByServer: number;
  /** Events dropped from a full queue, oldest first. */
  dropped: number;
  /** Events not made because consent was not granted. */
  discarded: number;
  retries: number;
  requests: number;
  beacons: number;
}

export class AmelioClient {
  constructor(options: InitOptions);
  readonly endpoint: string;
  readonly project: string;
  readonly stats: AmelioStats;
  /** The consent in force: "denied" under Do Not Track or GPC unless the page opted out. */
  readonly consent: Consent;
  /** Why consent is denied whatever the page says. */
  readonly blockedBy: "doNotTrack" | "globalPrivacyControl" | null;
  /** The tab session's random id, to pass as `sessionId` to `POST /v1/search`; null
   *  without consent. */
  readonly sessionId: string | null;
  /** Events waiting to be sent (a copy). */
  readonly pending: ReadonlyArray<Record<string, unknown>>;
  setConsent(consent: Consent): void;
  setUser(userId: string | null): void;
  /** Bind rendered results (one element per result in rank order, or with
   *  `data-doc-id`) to the search response they came from. */
  track(response: SearchResponse, elements: Iterable<Element> | ArrayLike<Element>,
        options?: TrackOptions): void;
  vote(docId: string, direction: VoteDirection,
       options?: { comment?: string; queryId?: string }): boolean;
  pin(docId: string, options?: { queryId?: string }): boolean;
  hide(docId: string, reason?: string, options?: { queryId?: string }): boolean;
  /** Send what is queued now (keepalive: the request may outlive the page). */
  flush(options?: { keepalive?: boolean }): Promise<void>;
  /** Idle compute's controller once `loadCompute()` made it; null before. */
  readonly compute: ComputeController | null;
  /** Idle compute's controller (the init option `compute` its options): the first call
   *  imports amelio/compute.js, later ones answer the same controller. It does nothing
   *  until started and consented. */
  loadCompute(): Promise<ComputeController>;
  /** Render the idle-compute settings panel into `el` (appended); loads
   *  amelio/compute.js and amelio/panel.js the first time. */
  settingsPanel(el: Element): Promise<SettingsPanel>;
  /** Remove every listener and stop idle compute. */
  destroy(): void;
}

export const Amelio: {
  readonly VERSION: string;
  init(options: InitOptions): AmelioClient;
};
export default Amelio;

export const VERSION: string;
export const REFORMULATION_WINDOW_MS: number;
export const REFORMULATION_SIMILARITY: number;
export const DWELL_POSITIVE_MS: number;
/** Folded words joined by single spaces, as the server normalizes queries. */
export function normalizeQuery(text: string): string;
/** difflib.SequenceMatcher(None, a, b).ratio(), for texts under 200 characters. */
export function similarity(a: string, b: string): number;
