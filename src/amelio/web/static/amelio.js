// amelio.js: the browser client of Amelio (docs/client.md), the module a page imports.
//
// ES modules, no build step, no dependency. This entry is the feedback client
// (amelio/feedback.js): a search page binds each rendered result list to the search
// response it came from, and the client sends what the person then does as
// MartyFeedbackEventV1 events, only with consent. Idle compute (amelio/compute.js, with
// its worker amelio/embed-worker.js) and its settings panel (amelio/panel.js) are
// imported with import() only when the page asks for them (`loadCompute()`,
// `settingsPanel()`, or the init option `compute`), so a page that only sends feedback
// downloads this file and feedback.js, nothing more.
//
//   import { Amelio } from "https://amelio.example.com/static/amelio.js";
//   const amelio = Amelio.init({ endpoint: "https://amelio.example.com", key: "amk_…",
//                                consent: "unknown" });
//   amelio.track(searchResponse, document.querySelectorAll("#results > li"));
//   amelio.setConsent("granted");   // from the page's consent banner
//
// Types: amelio.d.ts beside this file (and amelio/compute.d.ts, amelio/panel.d.ts),
// checked against the JSDoc by tests/test_web_client_types.py.

import { AmelioClient, VERSION } from "./amelio/feedback.js";

export {
  AmelioClient, DWELL_POSITIVE_MS, REFORMULATION_SIMILARITY, REFORMULATION_WINDOW_MS, VERSION,
  normalizeQuery, similarity,
} from "./amelio/feedback.js";

/** @typedef {import("./amelio/feedback.js").InitOptions} InitOptions */

export const Amelio = {
  VERSION,
  /**
   * A feedback client (the page may hold several).
   * @param {InitOptions} options
   * @returns {AmelioClient}
   */
  init(options) {
    return new AmelioClient(options);
  },
};

export default Amelio;
