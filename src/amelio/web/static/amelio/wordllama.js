/**
 * WordLlama (`l2_supercat`, 256 dimensions) in plain JavaScript: the server's document
 * embeddings, computed in a browser.
 *
 * Why this exists: browsers that lend idle time embed search documents for the
 * server (see embed-worker.js), and a vector is only worth storing when it is
 * the one `amelio.embeddings.load_embedder("wordllama").embed(texts)` would have
 * computed, because the server compares the two and stores them side by side. So this
 * module reproduces wordllama's inference step by step, from the very files the
 * server uses (served by `GET /v1/contributions/models/wordllama/…`), with no
 * third-party code and no build step:
 *
 * 1. Tokenizer (the Hugging Face `tokenizers` JSON that ships with wordllama: Llama 2's
 *    SentencePiece-style BPE). The special tokens (`<unk>`, `<s>`, `</s>`) are cut out
 *    of the raw text first (leftmost-longest), exactly as `tokenizers` does even
 *    without `add_special_tokens`. Each remaining segment is normalised (prepend "▁",
 *    every " " becomes "▁"); there is no pre-tokenizer, so the whole segment is one
 *    BPE "word": each character is its vocabulary id or, failing that, its UTF-8 bytes
 *    (`<0xNN>`, byte fallback), then merges are applied lowest rank first, leftmost
 *    first on ties, with the same priority queue as `tokenizers`' Rust code.
 *    For speed, a segment is cut before each "▁" that follows another character: no
 *    token of this vocabulary holds a "▁" after another character (checked at load,
 *    else the whole segment is merged at once), so no merge can cross such a cut and
 *    the pieces (mostly words) are merged independently and cached.
 * 2. Weights: a safetensors file (8-byte little-endian header length, a JSON header,
 *    raw data); the `embedding.weight` matrix is fp16, kept as it is (16 MB) and
 *    widened to fp32 through a 65 536-entry table, exactly like numpy's astype.
 * 3. Pooling: wordllama pads a batch and averages each text's token vectors under the
 *    attention mask (padding never counts, no truncation), then divides by the L2
 *    norm; no binarisation. The average's divisor cancels in the normalisation, so
 *    the vector is the normalised sum (accumulated in float64, returned as float32).
 *    A text with no token at all ("") has no direction: Python returns NaNs there,
 *    which JSON cannot carry, so this returns zeros.
 *
 * @module amelio/wordllama
 */

export const MODEL = "wordllama";
export const DIMENSIONS = 256;
export const FILES = Object.freeze({ tokenizer: "tokenizer.json", weights: "weights.safetensors" });

const SPACE = "\u2581";  // SentencePiece's visible space, "▁"
const PIECES = /\u2581+[^\u2581]*/g;  // a run of "▁" and the characters up to the next
const PIECE_CACHE_LIMIT = 100_000;
const RANK_SCALE = 2 ** 32;  // heap key: rank * 2^32 + position (both stay exact)

/**
 * The Hugging Face tokenizer of WordLlama's `l2_supercat`, reimplemented: only the
 * features its JSON uses; anything else is refused at load rather than approximated.
 */
export class WordLlamaTokenizer {
  /**
   * @param {any} config the parsed tokenizer JSON
   */
  constructor(config) {
    const model = config?.model;
    if (!model || model.type !== "BPE") {
      throw new Error(`tokenizer.json: expected a BPE model, found ${model?.type}`);
    }
    if (model.dropout || model.continuing_subword_prefix || model.end_of_word_suffix) {
      throw new Error("tokenizer.json: dropout and subword prefixes/suffixes are not supported");
    }
    if (config.pre_tokenizer) {
      throw new Error(`tokenizer.json: unsupported pre_tokenizer ${config.pre_tokenizer.type}`);
    }
    /** @type {string} */
    this.prepend = "";
    /** @type {boolean} */
    this.spacesToMarks = false;
    this.#readNormalizer(config.normalizer);

    /** @type {Map<string, number>} */
    this.vocab = new Map(Object.entries(model.vocab));
    this.vocabSize = this.vocab.size;
    this.byteFallback = Boolean(model.byte_fallback);
    this.fuseUnk = Boolean(model.fuse_unk);
    /** @type {number | null} */
    this.unkId = model.unk_token != null ? this.vocab.get(model.unk_token) ?? null : null;
    /** Token ids of the 256 bytes ("<0x41>"), -1 where the vocabulary lacks one. */
    this.byteIds = new Int32Array(256).fill(-1);
    for (let b = 0; b < 256; b++) {
      const id = this.vocab.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
      if (id !== undefined) this.byteIds[b] = id;
    }

    /** (left id, right id) -> rank * 2^32 + merged id; a later duplicate wins, as in Rust. */
    /** @type {Map<number, number>} */
    this.merges = new Map();
    const stride = this.vocabSize + 1;
    this.pairStride = stride;
    model.merges.forEach((/** @type {string | string[]} */ merge, /** @type {number} */ rank) => {
      const [a, b] = typeof merge === "string" ? splitMerge(merge) : merge;
      const left = this.vocab.get(a);
      const right = this.vocab.get(b);
      const merged = this.vocab.get(a + b);
      if (left === undefined || right === undefined || merged === undefined) {
        throw new Error(`tokenizer.json: merge ${JSON.stringify(merge)} uses unknown tokens`);
      }
      this.merges.set(left * stride + right, rank * RANK_SCALE + merged);
    });

    /** Added tokens, matched on the raw text (leftmost, then longest). */
    /** @type {Map<string, number>} */
    this.added = new Map();
    for (const token of config.added_tokens ?? []) {
      if (token.normalized || token.single_word || token.lstrip || token.rstrip) {
        throw new Error(`tokenizer.json: added token ${token.content} uses unsupported options`);
      }
      this.added.set(token.content, token.id);
    }
    const alternatives = [...this.added.keys()]
      .sort((x, y) => y.length - x.length)
      .map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    /** @type {RegExp | null} */
    this.addedPattern = alternatives.length ? new RegExp(alternatives.join("|"), "g") : null;

    /** Whether no token holds "▁" after another character: then pieces never merge. */
    this.splitPieces = ![...this.vocab.keys()].some((token) => {
      for (let i = token.indexOf(SPACE, 1); i > 0; i = token.indexOf(SPACE, i + 1)) {
        if (token[i - 1] !== SPACE) return true;
      }
      return false;
    });
    /** @type {Map<string, number[]>} */
    this.cache = new Map();
  }

  /**
   * The normalizer this tokenizer supports: Prepend, Replace (a plain string) or a
   * Sequence of those, as the Llama 2 tokenizer has (prepend "▁", " " -> "▁").
   * @param {any} normalizer
   */
  #readNormalizer(normalizer) {
    if (!normalizer) return;
    const steps = normalizer.type === "Sequence" ? normalizer.normalizers : [normalizer];
    for (const [index, step] of steps.entries()) {
      if (step.type === "Prepend" && index === 0) {
        this.prepend = step.prepend;
      } else if (step.type === "Replace" && step.pattern?.String === " "
                 && step.content === SPACE) {
        this.spacesToMarks = true;
      } else {
        throw new Error(`tokenizer.json: unsupported normalizer step ${JSON.stringify(step)}`);
      }
    }
  }

  /**
   * The token ids of `text`, as `tokenizer.encode(text, add_special_tokens=False).ids`.
   * @param {string} text
   * @returns {number[]}
   */
  encode(text) {
    /** @type {number[]} */
    const ids = [];
    if (!this.addedPattern) {
      this.#encodeSegment(text, ids);
      return ids;
    }
    let start = 0;
    for (const match of text.matchAll(this.addedPattern)) {
      this.#encodeSegment(text.slice(start, match.index), ids);
      ids.push(/** @type {number} */ (this.added.get(match[0])));
      start = /** @type {number} */ (match.index) + match[0].length;
    }
    this.#encodeSegment(text.slice(start), ids);
    return ids;
  }

  /**
   * Normalises one segment (text between added tokens) and appends its BPE ids.
   * @param {string} segment
   * @param {number[]} ids
   */
  #encodeSegment(segment, ids) {
    if (!segment) return;  // Prepend leaves an empty string empty
    let normalized = this.prepend + segment;
    if (this.spacesToMarks) normalized = normalized.replaceAll(" ", SPACE);
    const first = this.splitPieces ? normalized.indexOf(SPACE) : -1;
    /** @type {string[]} */
    let pieces = [normalized];
    if (first >= 0) {
      pieces = /** @type {string[]} */ (normalized.slice(first).match(PIECES));
      if (first > 0) pieces.unshift(normalized.slice(0, first));  // no Prepend: a head
    }
    for (const piece of pieces) {
      let found = this.cache.get(piece);
      if (!found) {
        found = this.bpe(piece);
        if (this.cache.size >= PIECE_CACHE_LIMIT) this.cache.clear();
        this.cache.set(piece, found);
      }
      for (const id of found) ids.push(id);
    }
  }

  /**
   * One BPE "word": characters (or their bytes), then merges by rank, leftmost first
   * on ties, with a priority queue (tokenizers' `Word::merge_all`).
   * @param {string} word
   * @returns {number[]}
   */
  bpe(word) {
    /** @type {number[]} */
    const symbols = [];
    let pendingUnk = false;
    for (const char of word) {
      const id = this.vocab.get(char);
      if (id !== undefined) {
        pendingUnk = false;
        symbols.push(id);
        continue;
      }
      if (this.byteFallback) {
        const bytes = utf8(char);
        if (bytes.every((b) => this.byteIds[b] >= 0)) {
          pendingUnk = false;
          for (const b of bytes) symbols.push(this.byteIds[b]);
          continue;
        }
      }
      if (this.unkId === null) throw new Error(`no token for ${JSON.stringify(char)}`);
      if (!(this.fuseUnk && pendingUnk)) symbols.push(this.unkId);
      pendingUnk = true;
    }
    const n = symbols.length;
    if (n < 2) return symbols;

    const ids = Int32Array.from(symbols);
    const prev = new Int32Array(n);
    const next = new Int32Array(n);
    const alive = new Uint8Array(n).fill(1);
    for (let i = 0; i < n; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const heap = new MinHeap();
    for (let i = 0; i + 1 < n; i++) {
      const merge = this.merges.get(ids[i] * this.pairStride + ids[i + 1]);
      if (merge !== undefined) heap.push(Math.floor(merge / RANK_SCALE) * RANK_SCALE + i);
    }
    while (heap.size) {
      const key = heap.pop();
      const pos = key % RANK_SCALE;
      const rank = (key - pos) / RANK_SCALE;
      const right = next[pos];
      if (!alive[pos] || right < 0) continue;
      const merge = this.merges.get(ids[pos] * this.pairStride + ids[right]);
      // A stale entry: this pair changed since it was queued.
      if (merge === undefined || Math.floor(merge / RANK_SCALE) !== rank) continue;
      ids[pos] = merge % RANK_SCALE;
      alive[right] = 0;
      const after = next[right];
      next[pos] = after;
      if (after >= 0) prev[after] = pos;
      const before = prev[pos];
      if (before >= 0) {
        const m = this.merges.get(ids[before] * this.pairStride + ids[pos]);
        if (m !== undefined) heap.push(Math.floor(m / RANK_SCALE) * RANK_SCALE + before);
      }
      if (after >= 0) {
        const m = this.merges.get(ids[pos] * this.pairStride + ids[after]);
        if (m !== undefined) heap.push(Math.floor(m / RANK_SCALE) * RANK_SCALE + pos);
      }
    }
    /** @type {number[]} */
    const out = [];
    for (let i = 0; i >= 0; i = next[i]) out.push(ids[i]);
    return out;
  }
}

/**
 * A merge line "a b" of the older tokenizer.json format: the tokens either side of
 * the one space (a token never holds a plain space: this vocabulary uses "▁").
 * @param {string} merge
 * @returns {[string, string]}
 */
function splitMerge(merge) {
  const at = merge.indexOf(" ", 1);
  if (at < 0) throw new Error(`tokenizer.json: malformed merge ${JSON.stringify(merge)}`);
  return [merge.slice(0, at), merge.slice(at + 1)];
}

const encoder = new TextEncoder();

/**
 * @param {string} char one code point (a lone surrogate encodes as U+FFFD)
 * @returns {number[]}
 */
function utf8(char) {
  return Array.from(encoder.encode(char));
}

/** A binary min-heap of non-negative numbers (the keys above). */
class MinHeap {
  /** @type {number[]} */
  #items = [];

  get size() {
    return this.#items.length;
  }

  /** @param {number} value */
  push(value) {
    const items = this.#items;
    let i = items.length;
    items.push(value);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (items[parent] <= value) break;
      items[i] = items[parent];
      i = parent;
    }
    items[i] = value;
  }

  /** @returns {number} */
  pop() {
    const items = this.#items;
    const top = items[0];
    const last = /** @type {number} */ (items.pop());
    const n = items.length;
    if (n) {
      let i = 0;
      for (;;) {
        let child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && items[child + 1] < items[child]) child++;
        if (items[child] >= last) break;
        items[i] = items[child];
        i = child;
      }
      items[i] = last;
    }
    return top;
  }
}

/**
 * fp16 bit pattern -> its exact float32 value, for all 65 536 patterns.
 * @returns {Float32Array}
 */
function halfTable() {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >> 10) & 0x1f;
    const fraction = h & 0x3ff;
    if (exponent === 0) table[h] = sign * fraction * 2 ** -24;  // zero and subnormals
    else if (exponent === 31) table[h] = fraction ? NaN : sign * Infinity;
    else table[h] = sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
  }
  return table;
}

/**
 * @typedef {object} Matrix
 * @property {number} rows
 * @property {number} cols
 * @property {Uint16Array | Float32Array} data row-major; fp16 bit patterns or float32
 * @property {"F16" | "F32"} dtype
 */

/**
 * Reads one 2-D tensor from a safetensors file: an 8-byte little-endian header
 * length, a JSON header ({name: {dtype, shape, data_offsets}}), then the raw data.
 * @param {ArrayBuffer} buffer the whole file
 * @param {string} [name]
 * @returns {Matrix}
 */
export function readSafetensors(buffer, name = "embedding.weight") {
  if (buffer.byteLength < 8) throw new Error("weights: not a safetensors file (too short)");
  const view = new DataView(buffer);
  const headerBytes = view.getUint32(0, true) + view.getUint32(4, true) * 2 ** 32;
  if (8 + headerBytes > buffer.byteLength) {
    throw new Error("weights: not a safetensors file (header longer than the file)");
  }
  /** @type {Record<string, {dtype: string, shape: number[], data_offsets: [number, number]}>} */
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, headerBytes)));
  const tensor = header[name];
  if (!tensor) throw new Error(`weights: no tensor ${name} in the safetensors file`);
  const { dtype, shape, data_offsets: [begin, end] } = tensor;
  if (shape.length !== 2) throw new Error(`weights: ${name} is not a matrix (${shape})`);
  const [rows, cols] = shape;
  const width = { F16: 2, F32: 4 }[dtype];
  if (!width) throw new Error(`weights: unsupported dtype ${dtype} (F16 or F32 only)`);
  const start = 8 + headerBytes + begin;
  if (end - begin !== rows * cols * width || 8 + headerBytes + end > buffer.byteLength) {
    throw new Error(`weights: ${name}'s data does not match its shape ${shape}`);
  }
  // Typed arrays need aligned offsets; copy the data when the file does not align it.
  const data = start % width === 0 ? buffer : buffer.slice(start, start + rows * cols * width);
  const offset = start % width === 0 ? start : 0;
  return {
    rows, cols, dtype,
    data: dtype === "F16" ? new Uint16Array(data, offset, rows * cols)
      : new Float32Array(data, offset, rows * cols),
  };
}

/** Tokenizer + embedding matrix: `embed` is wordllama's `embed(texts, norm=True)`. */
export class WordLlama {
  /**
   * @param {WordLlamaTokenizer} tokenizer
   * @param {Matrix} matrix
   */
  constructor(tokenizer, matrix) {
    this.tokenizer = tokenizer;
    this.matrix = matrix;
    this.dimensions = matrix.cols;
    this.table = matrix.dtype === "F16" ? halfTable() : null;
    /** Per-token counts of the text being embedded (all zero between calls). */
    this.counts = new Uint32Array(matrix.rows);
  }

  /**
   * @param {string} text
   * @returns {number[]}
   */
  tokenize(text) {
    return this.tokenizer.encode(text);
  }

  /**
   * The unit vector of `text` (zeros when it has no token).
   * @param {string} text
   * @returns {Float32Array}
   */
  embed(text) {
    const { rows, cols, data } = this.matrix;
    const table = this.table;
    const counts = this.counts;
    // Each distinct token's row is added once, times its count: documents repeat
    // tokens ("the", ","), and the products stay exact in float64.
    /** @type {number[]} */
    const distinct = [];
    for (const token of this.tokenizer.encode(text)) {
      const id = token < 0 ? 0 : token >= rows ? rows - 1 : token;  // numpy's clip
      if (counts[id]++ === 0) distinct.push(id);
    }
    const sum = new Float64Array(cols);
    for (const id of distinct) {
      const count = counts[id];
      counts[id] = 0;
      const base = id * cols;
      if (table) {
        for (let j = 0; j < cols; j++) sum[j] += count * table[data[base + j]];
      } else {
        for (let j = 0; j < cols; j++) sum[j] += count * data[base + j];
      }
    }
    let norm = 0;
    for (let j = 0; j < cols; j++) norm += sum[j] * sum[j];
    norm = Math.sqrt(norm);
    const out = new Float32Array(cols);
    if (norm > 0) for (let j = 0; j < cols; j++) out[j] = sum[j] / norm;
    return out;
  }
}

/**
 * @typedef {object} Listing
 * @property {string} model
 * @property {number} dimensions
 * @property {Record<string, {bytes: number, sha256: string}>} files
 */

/**
 * Downloads the model from `modelBase` (the listing URL, ending in "/"), checks each
 * file against the listing's SHA-256 where the browser can hash (a secure context),
 * and builds the model. File URLs carry the digest (`?v=`), so the browser's HTTP
 * cache keeps them across page loads and never serves an outdated version.
 * @param {string} modelBase e.g. "https://host/v1/contributions/models/wordllama/"
 * @param {{fetch?: typeof fetch}} [options]
 * @returns {Promise<WordLlama>}
 */
export async function loadWordLlama(modelBase, options = {}) {
  const get = options.fetch ?? fetch;
  if (typeof modelBase !== "string" || !modelBase.endsWith("/")) {
    throw new Error(`modelBase must be a URL ending in "/", got ${JSON.stringify(modelBase)}`);
  }
  const base = new URL(modelBase, globalThis.location?.href);
  /** @type {Listing} */
  const listing = await (await download(get, base, { cache: "no-cache" })).json();
  if (listing.model !== MODEL || listing.dimensions !== DIMENSIONS) {
    throw new Error(`${base} serves ${listing.model}/${listing.dimensions}, `
                    + `not ${MODEL}/${DIMENSIONS}`);
  }
  const [tokenizerBytes, weightsBytes] = await Promise.all(
    [FILES.tokenizer, FILES.weights].map((name) => fetchChecked(get, base, name, listing)));
  const tokenizer = new WordLlamaTokenizer(JSON.parse(new TextDecoder().decode(tokenizerBytes)));
  const matrix = readSafetensors(weightsBytes);
  if (matrix.cols !== DIMENSIONS || matrix.rows < tokenizer.vocabSize) {
    throw new Error(`weights: a ${matrix.rows}×${matrix.cols} matrix does not fit `
                    + `${tokenizer.vocabSize} tokens × ${DIMENSIONS}`);
  }
  return new WordLlama(tokenizer, matrix);
}

/**
 * @param {typeof fetch} get
 * @param {URL} url
 * @param {RequestInit} [init]
 * @returns {Promise<Response>}
 */
async function download(get, url, init) {
  let response;
  try {
    response = await get(url, init);
  } catch (error) {
    throw new Error(`could not download ${url}: ${/** @type {Error} */ (error).message}`);
  }
  if (!response.ok) {
    let detail = "";
    try {
      detail = (await response.json())?.error?.message ?? "";
    } catch {
      // not Amelio's JSON error shape: the status says enough
    }
    throw new Error(`could not download ${url}: HTTP ${response.status}${detail ? ` (${detail})` : ""}`);
  }
  return response;
}

/**
 * One listed file, checked against its size and SHA-256; a mismatch is downloaded once
 * more past the HTTP cache, in case the cached copy is the corrupted one.
 * @param {typeof fetch} get
 * @param {URL} base
 * @param {string} name
 * @param {Listing} listing
 * @returns {Promise<ArrayBuffer>}
 */
async function fetchChecked(get, base, name, listing) {
  const expected = listing.files?.[name];
  if (!expected) throw new Error(`${base} lists no ${name}`);
  const url = new URL(`${encodeURIComponent(name)}?v=${expected.sha256.slice(0, 16)}`, base);
  let problem = "";
  for (const cache of /** @type {RequestCache[]} */ (["default", "reload"])) {
    const bytes = await (await download(get, url, { cache })).arrayBuffer();
    problem = await mismatch(bytes, expected);
    if (!problem) return bytes;
  }
  throw new Error(`${url}: ${problem}`);
}

/**
 * @param {ArrayBuffer} bytes
 * @param {{bytes: number, sha256: string}} expected
 * @returns {Promise<string>} what is wrong, or "" when nothing is
 */
async function mismatch(bytes, expected) {
  if (bytes.byteLength !== expected.bytes) {
    return `${bytes.byteLength} bytes received, ${expected.bytes} listed`;
  }
  const subtle = globalThis.crypto?.subtle;  // absent outside secure contexts
  if (!subtle) return "";
  const digest = new Uint8Array(await subtle.digest("SHA-256", bytes));
  const hex = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  return hex === expected.sha256 ? "" : `SHA-256 ${hex} received, ${expected.sha256} listed`;
}
