// Types of amelio/panel.js, the idle-compute settings panel (docs/client.md#idle-compute),
// which `amelio.settingsPanel(el)` imports on demand. Checked against the JSDoc by
// tests/test_web_client_types.py.

import type { ComputeController } from "./compute.js";

/** What `settingsPanel()` answers. */
export interface SettingsPanel {
  /** The panel's host element (its content is in an open shadow root). */
  element: HTMLElement;
  /** Show the preferences and status again. */
  refresh(): void;
  /** Stop following the controller and remove the panel. */
  destroy(): void;
}

/** Render a controller's settings panel into `el` (appended). */
export function settingsPanel(compute: ComputeController, el: Element): SettingsPanel;
