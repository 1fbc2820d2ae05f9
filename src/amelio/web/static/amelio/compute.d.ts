// Types of amelio/compute.js, idle compute (docs/client.md#idle-compute): a page reaches
// it through `await amelio.loadCompute()`, or imports it to build its own controls.
// Checked against the JSDoc by tests/test_web_client_types.py.

import type { AmelioClient, Consent } from "../amelio.js";

export type DeviceTier = "HIGH+" | "HIGH" | "MID+" | "MID" | "LOW+" | "LOW" | "DEGRADED";

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
  /** The embedding worker (default `embed-worker.js` beside this module). */
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

/** `amelio.compute`: an EventTarget whose "status" events carry a ComputeStatus. */
export class ComputeController extends EventTarget {
  /** Made by the client's `loadCompute()`; the client's endpoint, key and project. */
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
