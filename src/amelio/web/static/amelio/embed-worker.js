/**
 * amelio/embed-worker.js: a module Web Worker that embeds search documents with
 * WordLlama, for the idle compute a page lends the Amelio server (compute.js, task type
 * `embed_documents`).
 *
 * Why a worker: loading the model (16 MB of weights, a 1.8 MB tokenizer) and embedding
 * must never block the page; the page stops the work at once, on user activity, with
 * `worker.terminate()`. Why WordLlama in plain JavaScript: the vectors are stored
 * next to the server's own and must equal them (cosine ≥ 0.9999), so
 * wordllama.js reproduces wordllama's tokenizer, weights and pooling exactly,
 * from the very files the server embeds with, with no third-party code.
 *
 * Messages (the contract in the project's contribution protocol):
 *
 *   page -> worker                                worker -> page
 *   {type: "init", modelBase: ".../wordllama/"}   {type: "ready", model: "wordllama",
 *                                                  dimensions: 256, loadMs}
 *                                                 or {type: "error", id: null, message}
 *   {type: "embed", id, texts: [string]}          {type: "result", id, vectors:
 *                                                  Float32Array(n × 256), computeMs}
 *                                                 or {type: "error", id, message}
 *   {type: "tokenize", id, texts: [string]}       {type: "tokens", id, ids: [[int]],
 *                                                  computeMs}   (tests and debugging)
 *
 * `modelBase` is the model listing's URL, ending in "/" (the files are fetched under
 * it, checked against the listing's SHA-256). The model loads once: a second `init`
 * answers `ready` again from the same load. `embed` and `tokenize` may be sent right
 * after `init`: they wait for the load, and fail with its error. `computeMs` is the
 * time spent embedding that batch only (no load, no waiting), which the server
 * counts against the page's CPU budget. `vectors` is one row-major matrix, vector i
 * at [i × 256, (i + 1) × 256), its buffer transferred (not copied): the page sends
 * its bytes as they are (base64 of little-endian float32) with no repacking on its
 * own thread. Each vector is a unit vector; a text with no token at all, the empty
 * string, gets zeros.
 */

import { DIMENSIONS, MODEL, loadWordLlama } from "./wordllama.js";

/** @typedef {import("./wordllama.js").WordLlama} WordLlama */

/** @type {Promise<WordLlama> | null} */
let loading = null;
/** @type {number} */
let loadMs = 0;

/**
 * @param {unknown} error
 * @returns {string}
 */
function describe(error) {
  return error instanceof Error ? error.message : String(error);
}

/**
 * @param {unknown} texts
 * @returns {string[]}
 */
function checkTexts(texts) {
  if (!Array.isArray(texts) || !texts.every((t) => typeof t === "string")) {
    throw new Error("texts must be an array of strings");
  }
  return texts;
}

/**
 * Starts the one load of the model, and answers `ready` (or the load's error).
 * @param {unknown} modelBase
 */
async function init(modelBase) {
  if (!loading) {
    const started = performance.now();
    loading = loadWordLlama(/** @type {string} */ (modelBase));
    loading.then(() => { loadMs = performance.now() - started; }, () => {});
  }
  try {
    await loading;
  } catch (error) {
    loading = null;  // a later init may try again (the network may be back)
    self.postMessage({ type: "error", id: null,
                       message: `could not load the ${MODEL} model: ${describe(error)}` });
    return;
  }
  self.postMessage({ type: "ready", model: MODEL, dimensions: DIMENSIONS,
                     loadMs: Math.round(loadMs * 10) / 10 });
}

/**
 * The loaded model, or an error that says what went wrong.
 * @returns {Promise<WordLlama>}
 */
async function loaded() {
  if (!loading) throw new Error('the model is not loaded: send {type: "init", modelBase} first');
  try {
    return await loading;
  } catch (error) {
    throw new Error(`the ${MODEL} model did not load: ${describe(error)}`);
  }
}

self.addEventListener("message", async (/** @type {MessageEvent} */ event) => {
  const message = event.data ?? {};
  const id = message.id ?? null;
  try {
    switch (message.type) {
      case "init":
        await init(message.modelBase);
        return;
      case "embed": {
        const texts = checkTexts(message.texts);
        const model = await loaded();
        const started = performance.now();
        const vectors = new Float32Array(texts.length * DIMENSIONS);
        texts.forEach((text, i) => vectors.set(model.embed(text), i * DIMENSIONS));
        const computeMs = performance.now() - started;
        self.postMessage({ type: "result", id, vectors, computeMs }, [vectors.buffer]);
        return;
      }
      case "tokenize": {
        const texts = checkTexts(message.texts);
        const model = await loaded();
        const started = performance.now();
        const ids = texts.map((text) => model.tokenize(text));
        self.postMessage({ type: "tokens", id, ids, computeMs: performance.now() - started });
        return;
      }
      default:
        throw new Error(`unknown message type ${JSON.stringify(message.type)} `
                        + "(expected init, embed or tokenize)");
    }
  } catch (error) {
    self.postMessage({ type: "error", id, message: describe(error) });
  }
});
