// Types of amelio.js, Amelio's browser client (docs/client.md). Hand-written:
// amelio.js needs no build step, and this file documents what it exports.

export type Consent = "granted" | "denied" | "unknown";
export type DeviceTier = "HIGH+" | "HIGH" | "MID+" | "MID" | "LOW+" | "LOW" | "DEGRADED";
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
  /** Idle compute (docs/client.md#idle-compute). Nothing runs before the person grants
   *  its own consent (`compute.setConsent("granted")` or the settings panel). */
  compute?: ComputeOptions;
}

// -- idle compute --------------------------------------------------------------------

export interface ComputeOptions {
  /** Start the controller at init (default false: call `compute.start()`). */
  enabled?: boolean;
  /** No pointer, key, wheel, scroll or touch input for this long makes the page idle
   *  (default 30000); a hidden page is idle at once. */
  idleAfterMs?: number;
  /** Lower the tier's hourly CPU budget; a larger value changes nothing. */
  cpuSecondsPerHour?: number;
  /** Tasks asked for per lease, 1–8 (default: up to 4, as many as the hourly budget
   *  left covers at the last task's cost; 1 until a task has run). */
  tasksPerLease?: number;
  /** The embedding worker (default `amelio-embed-worker.js` beside amelio.js). */
  workerUrl?: string | URL;
  /** Called on every status change (as the controller's "status" event). */
  onStatus?: (status: ComputeStatus) => void;
}

/** What `deviceTier()` decides from; an unknown fact is null or absent. */
export interface DeviceFacts {
  /** `navigator.hardwareConcurrency` */
  cores?: number | null;
  /** `navigator.deviceMemory` (Chromium only, at most 8) */
  memoryGb?: number | null;
  /** A WebGPU adapter was found. */
  webgpu?: boolean;
  /** `navigator.getBattery()`: level from 0 to 1; `charging` unknown is not taken as
   *  discharging. */
  battery?: { level: number; charging?: boolean } | null;
  /** `navigator.connection.saveData` */
  saveData?: boolean;
}

/** Local time; `to` before `from` runs past midnight, `from` equal to `to` is all day. */
export interface ComputeWindow {
  /** 0 Sunday … 6 Saturday; absent: every day. */
  days?: number[];
  /** "HH:MM" */
  from: string;
  /** "HH:MM" */
  to: string;
}

export interface ComputePreferences {
  /** taskType → purpose → consent; nothing is granted by default. */
  consent: Record<string, Record<string, Consent>>;
  /** 0–100 (default 50, "balanced"). */
  intensity: number;
  /** When it may run; empty: any time. */
  windows: ComputeWindow[];
  /** CPU-seconds per day (default 600); null: no daily quota. */
  dailyQuotaSeconds: number | null;
}

export type IntensityPreset = "off" | "minimal" | "low" | "balanced" | "high" | "max";

export interface ComputePreferenceChanges {
  consent?: Record<string, Record<string, Consent>>;
  intensity?: number | IntensityPreset;
  windows?: ComputeWindow[];
  dailyQuotaSeconds?: number | null;
}

export interface ComputeCounts {
  leased: number;
  /** Computed and sent. */
  computed: number;
  /** Accepted by the server (a second client or its spot-check agreed). */
  accepted: number;
  /** Waiting for a second opinion. */
  pending: number;
  rejected: number;
  duplicate: number;
  /** Leases that ran out first (409), or tasks skipped because theirs had. */
  expired: number;
  /** Dropped because the person came back. */
  interrupted: number;
  failed: number;
}

export type ComputeWaitReason =
  | "consent" | "intensity" | "starting" | "battery" | "tier" | "window" | "quota"
  | "budget" | "active" | "no-tasks" | "server" | "offline" | "error" | "other-tab";

export interface ComputeStatus {
  state: "stopped" | "waiting" | "working";
  /** Why it waits (null unless waiting). */
  reason: ComputeWaitReason | null;
  /** When it looks again (epoch ms), when known. */
  resumeAtMs: number | null;
  /** Null until the device was examined. */
  tier: DeviceTier | null;
  intensity: number;
  /** The hourly budget in force: the tier's, lowered by the page and the server,
   *  times intensity / 100. */
  cpuSecondsPerHour: number;
  /** CPU-seconds in the last hour, every tab of this browser. */
  usedLastHour: number;
  /** CPU-seconds today (local day). */
  usedToday: number;
  dailyQuotaSeconds: number | null;
  /** The server's trust in this client, once known. */
  trust: number | null;
  clientId: string | null;
  /** Counters since the page loaded. */
  tasks: ComputeCounts;
  error: string | null;
}

export interface SettingsPanel {
  /** The panel's host element (its content is in an open shadow root). */
  element: HTMLElement;
  refresh(): void;
  destroy(): void;
}

/** `amelio.compute`: an EventTarget whose "status" events carry a ComputeStatus. */
export class ComputeController extends EventTarget {
  /** Made by `Amelio.init` as `client.compute`; the client's endpoint, key and project. */
  constructor(client: AmelioClient, options?: ComputeOptions);
  /** Amelio's base URL. */
  readonly endpoint: string;
  /** Null until the device was examined (`detectTier()`). */
  readonly tier: DeviceTier | null;
  /** Work whenever every condition holds (consent first). */
  start(): void;
  /** Terminate the worker and drop its task; nothing runs until `start()`. */
  stop(): void;
  status(): ComputeStatus;
  /** A copy of the person's preferences. */
  preferences(): ComputePreferences;
  /** Change and keep (localStorage) the person's preferences; throws a TypeError on a
   *  bad value. */
  setPreferences(changes: ComputePreferenceChanges): ComputePreferences;
  /** Consent for one task type and purpose, or for every one this client knows
   *  (COMPUTE_TASKS); throws a TypeError on a task type or purpose it does not know. */
  setConsent(consent: Consent, which?: { taskType?: string; purpose?: string }): void;
  consentFor(taskType: string, purpose: string): Consent;
  /** Examine the device now (local: nothing is sent). */
  detectTier(): Promise<DeviceTier>;
  addEventListener(type: "status", listener: (event: CustomEvent<ComputeStatus>) => void,
                   options?: boolean | AddEventListenerOptions): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject | null,
                   options?: boolean | AddEventListenerOptions): void;
  removeEventListener(type: "status", listener: (event: CustomEvent<ComputeStatus>) => void,
                      options?: boolean | EventListenerOptions): void;
  removeEventListener(type: string, listener: EventListenerOrEventListenerObject | null,
                      options?: boolean | EventListenerOptions): void;
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
  /** Idle compute; does nothing until started and consented. */
  readonly compute: ComputeController;
  /** Render the idle-compute settings panel into `el` (appended). */
  settingsPanel(el: Element): SettingsPanel;
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

/** The tiers, best first. */
export const DEVICE_TIERS: readonly DeviceTier[];
/** CPU-seconds per hour each tier may lend at intensity 100 (frozen). */
export const CPU_SECONDS_PER_HOUR: Readonly<Record<DeviceTier, number>>;
export const INTENSITY_PRESETS: Readonly<Record<IntensityPreset, number>>;
/** Task type → the purposes it may serve. */
export const COMPUTE_TASKS: Readonly<Record<string, readonly string[]>>;
/** On battery and not charging, below this level (0.3) nothing runs. */
export const LOW_BATTERY_LEVEL: number;
/** The device tier from its facts (docs/client.md#device-tiers). */
export function deviceTier(facts?: DeviceFacts): DeviceTier;
/** This browser's facts (local: nothing is sent). */
export function deviceFacts(): Promise<DeviceFacts>;
/** Whether `date` (local time; default now) is in one of `windows`; none means any time. */
export function inTimeWindows(windows: ReadonlyArray<ComputeWindow>, date?: Date): boolean;
/** Render a controller's settings panel into `el` (appended). */
export function settingsPanel(compute: ComputeController, el: Element): SettingsPanel;
