/**
 * rotkws in JavaScript: a keyword spotter over an exported rotkws ONNX file, in the browser
 * (onnxruntime-web) and in Node (onnxruntime-node). The runtime is passed in, so this module
 * imports nothing and runs in either.
 *
 *   import * as ort from 'onnxruntime-node';                   // or 'onnxruntime-web'
 *   import { KeywordModel, KeywordSpotter } from './rotkws.js';
 *   const model = await KeywordModel.load(ort, 'kws12.onnx');  // a path, a URL or the bytes
 *   const spotter = new KeywordSpotter(model);                 // detection defaults: the model's
 *   const res = await spotter.process(samples);                // Float32Array @ model.sampleRate
 *   res.times, res.scores, res.detections                      // one entry per 100 ms hop
 *
 * It implements docs/onnx-interface.md and mirrors the Python runtime: app/spotter.py (hops,
 * state, flush), app/detection.py (smoothing, threshold, min hops, refractory period) and
 * app/twostage.py (WakeCommandSpotter: a wake word, then a command in the window after it).
 * Audio comes in mono at the model's sample rate (16 kHz): resample before `process`
 * (worklet.js does it for a microphone, with resample.js).
 */

export const HOP_SECONDS = 0.1;                          // the spotter scores every 100 ms of audio
export const NOT_KEYWORDS = ['_silence_', '_unknown_', '_other_'];  // labels that never fire a detection
export const REQUIRED_METADATA = ['labels', 'sample_rate', 'input_multiple', 'max_samples',
  'streaming', 'state_size'];
// app/detection.py's defaults; a model's `detection` metadata overrides them, options override both.
export const DETECTION_DEFAULTS = Object.freeze({ threshold: 0.5, smoothing: 3, minHops: 2, refractoryS: 1.0, flushS: 1.0 });
const METADATA_DETECTION_KEYS = { threshold: 'threshold', smoothing: 'smoothing', min_hops: 'minHops',
  refractory_s: 'refractoryS', flush_s: 'flushS' };     // the metadata's names → this module's
const FLOAT_PEAK_LIMIT = 4.0;   // float audio is [−1, 1]; far beyond, it is integer PCM stored as floats
const INT_FULL_SCALE = { Int16Array: 2 ** 15, Int32Array: 2 ** 31 };   // → [−1, 1)

/** A file that is not a usable rotkws model: the message names it and says why. */
export class ModelError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ModelError';
  }
}

// ─── the ONNX file's metadata_props, read from its protobuf bytes ───
// onnxruntime-web and -node expose no custom metadata, so read ModelProto field 14
// (repeated StringStringEntryProto { string key = 1; string value = 2; }) directly.

const MODEL_METADATA_PROPS = 14;
const WIRE = { VARINT: 0, FIXED64: 1, BYTES: 2, FIXED32: 5 };

function readVarint(bytes, pos) {
  let value = 0, scale = 1, byte;
  do {
    if (pos >= bytes.length) throw new Error('truncated varint');
    byte = bytes[pos++];
    value += (byte & 0x7f) * scale;   // arithmetic, not bit operations: lengths may pass 2^31
    scale *= 128;
  } while (byte & 0x80);
  return [value, pos];
}

/** The (field, wire type, start, end) of each field of one protobuf message in bytes[start, end). */
function* protobufFields(bytes, start, end) {
  let pos = start;
  while (pos < end) {
    let tag, value;
    [tag, pos] = readVarint(bytes, pos);
    const field = Math.floor(tag / 8), wire = tag % 8;
    const from = pos;
    if (wire === WIRE.VARINT) [value, pos] = readVarint(bytes, pos);
    else if (wire === WIRE.FIXED64) pos += 8;
    else if (wire === WIRE.FIXED32) pos += 4;
    else if (wire === WIRE.BYTES) {
      [value, pos] = readVarint(bytes, pos);
      pos += value;
      yield { field, wire, start: pos - value, end: pos };
      continue;
    } else throw new Error(`unsupported protobuf wire type ${wire} at byte ${from}`);
    if (pos > end) throw new Error(`field ${field} runs past the end of its message`);
    yield { field, wire, start: from, end: pos };
  }
  if (pos !== end) throw new Error('truncated message');
}

/** An ONNX file's metadata_props as {key: value} strings (what Python's custom_metadata_map gives). */
export function readOnnxMetadata(bytes) {
  bytes = asBytes(bytes);
  const text = new TextDecoder('utf-8', { fatal: true });
  const props = {};
  for (const entry of protobufFields(bytes, 0, bytes.length)) {
    if (entry.field !== MODEL_METADATA_PROPS || entry.wire !== WIRE.BYTES) continue;
    let key = '', value = '';
    for (const f of protobufFields(bytes, entry.start, entry.end)) {
      if (f.wire !== WIRE.BYTES) continue;
      if (f.field === 1) key = text.decode(bytes.subarray(f.start, f.end));
      if (f.field === 2) value = text.decode(bytes.subarray(f.start, f.end));
    }
    props[key] = value;
  }
  return props;
}

function asBytes(source) {
  if (source instanceof Uint8Array) return source;
  if (source instanceof ArrayBuffer) return new Uint8Array(source);
  if (ArrayBuffer.isView(source)) return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
  throw new TypeError(`expected the model as bytes (Uint8Array or ArrayBuffer), got ${describe(source)}`);
}

/** bytes, a URL (fetched) or, in Node, a file path → Uint8Array. */
async function readModelBytes(source) {
  if (typeof source !== 'string' && !(source instanceof URL)) return asBytes(source);
  const text = String(source);
  const isNode = typeof process !== 'undefined' && Boolean(process.versions?.node);
  if (isNode && !/^(https?|data|blob):/.test(text)) {
    const { readFile } = await import('node:fs/promises');
    try {
      return new Uint8Array(await readFile(source instanceof URL ? source : text));
    } catch (e) {
      throw new ModelError(`no model at ${text} (${e.code ?? e.message})`);
    }
  }
  const response = await fetch(source);
  if (!response.ok) throw new ModelError(`no model at ${text} (HTTP ${response.status})`);
  return new Uint8Array(await response.arrayBuffer());
}

function parseMetadata(props, name) {
  const missing = REQUIRED_METADATA.filter((k) => !(k in props));
  if (missing.length) {
    throw new ModelError(`${name}: not a rotkws model: its metadata lacks ${missing.join(', ')} ` +
      '(expected a file written by `rotkws export`)');
  }
  try {
    const integer = (key) => {
      const v = Number(props[key]);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${key} = ${JSON.stringify(props[key])} is not a whole number`);
      return v;
    };
    const labels = JSON.parse(props.labels);
    if (!Array.isArray(labels) || !labels.every((l) => typeof l === 'string')) throw new Error('labels is not a list of strings');
    return {
      labels, sampleRate: integer('sample_rate'), inputMultiple: integer('input_multiple'),
      maxSamples: integer('max_samples'), streaming: Boolean(JSON.parse(props.streaming)),
      stateSize: integer('state_size'), detection: JSON.parse(props.detection ?? '{}'),
      inputs: JSON.parse(props.inputs ?? 'null'), outputs: JSON.parse(props.outputs ?? 'null'),
    };
  } catch (e) {
    throw new ModelError(`${name}: unreadable rotkws metadata (${e.message})`);
  }
}

// ─── the model: one ONNX session and what its metadata says ───

/**
 * An ONNX session and its metadata, shared by every stream (one per page or process).
 *
 * labels, keywords (labels minus _silence_/_unknown_), sampleRate (Hz), inputMultiple and
 * maxSamples (which audio lengths the graph takes), streaming (false: a clip classifier, run
 * on a sliding window of maxSamples), stateSize, hopSamples (the spotter's step: HOP_SECONDS
 * rounded to the input multiple), detection (the model's detection defaults), metadata (all
 * metadata_props as strings).
 */
export class KeywordModel {
  /** Load from a path (Node), a URL or the bytes; `sessionOptions` go to InferenceSession.create. */
  static async load(ort, source, { sessionOptions = {} } = {}) {
    if (!ort?.InferenceSession || !ort?.Tensor) {
      throw new TypeError('expected the onnxruntime module as the first argument (onnxruntime-node or onnxruntime-web)');
    }
    const name = typeof source === 'string' || source instanceof URL ? String(source) : 'the model bytes';
    const bytes = await readModelBytes(source);
    let props;
    try {
      props = readOnnxMetadata(bytes);
    } catch (e) {
      throw new ModelError(`${name}: not an ONNX file (${e.message})`);
    }
    const meta = parseMetadata(props, name);
    let session;
    try {
      session = await ort.InferenceSession.create(bytes, { graphOptimizationLevel: 'all', intraOpNumThreads: 1,
        executionMode: 'sequential', ...sessionOptions });
    } catch (e) {
      throw new ModelError(`${name}: not a readable ONNX model (${e.message})`);
    }
    return new KeywordModel(ort, session, props, meta, name);
  }

  constructor(ort, session, metadata, meta, name) {
    Object.assign(this, { ort, session, metadata, name });
    this.labels = meta.labels;
    this.keywords = meta.labels.filter((l) => !NOT_KEYWORDS.includes(l));
    this.sampleRate = meta.sampleRate;
    this.inputMultiple = meta.inputMultiple;
    this.maxSamples = meta.maxSamples;
    this.streaming = meta.streaming;
    this.stateSize = meta.streaming ? meta.stateSize : 0;
    this.detection = meta.detection;
    const steps = Math.max(1, roundHalfEven(HOP_SECONDS * this.sampleRate / this.inputMultiple));
    this.hopSamples = Math.min(steps * this.inputMultiple, this.maxSamples);
    [this.inputNames, this.outputNames] = this._checkGraph(meta);
  }

  _checkGraph(meta) {
    const inputs = meta.inputs ?? (this.streaming ? ['audio', 'state'] : ['audio']);
    const outputs = meta.outputs ?? (this.streaming ? ['scores', 'state_out'] : ['scores']);
    const expected = this.streaming ? ['audio', 'state'] : ['audio'];
    const graph = [...this.session.inputNames].sort();
    if (JSON.stringify(graph) !== JSON.stringify([...expected].sort()) ||
        JSON.stringify([...inputs].sort()) !== JSON.stringify(graph) ||
        !outputs.every((o) => this.session.outputNames.includes(o))) {
      throw new ModelError(`${this.name}: graph inputs ${JSON.stringify(graph)} and outputs ` +
        `${JSON.stringify(this.session.outputNames)} do not match its metadata (expected inputs ` +
        `${JSON.stringify(expected)}, outputs ${JSON.stringify(outputs)})`);
    }
    return [inputs, outputs];
  }

  toString() {
    return `KeywordModel(${this.name}: ${this.labels.length} classes, ` +
      `${this.streaming ? 'streaming' : 'clip'}, ${this.sampleRate} Hz)`;
  }

  /** Zeros: the state before any audio (null for a clip model). */
  initialState(batch = 1) {
    return this.streaming ? new Float32Array(batch * this.stateSize) : null;
  }

  /**
   * One graph call. audio: Float32Array of batch × samples @ sampleRate, samples a multiple of
   * inputMultiple and ≤ maxSamples; state: Float32Array of batch × stateSize (or null)
   * → {scores: Float32Array batch × classes, state: Float32Array or null}.
   */
  async run(audio, state, batch = 1) {
    const samples = audio.length / batch;
    if (!Number.isInteger(samples) || samples < this.inputMultiple || samples % this.inputMultiple ||
        samples > this.maxSamples) {
      throw new RangeError(`expected a multiple of ${this.inputMultiple} samples, at most ` +
        `${this.maxSamples}, per batch row; got ${audio.length} samples for a batch of ${batch}`);
    }
    const { Tensor } = this.ort;
    const feeds = { audio: new Tensor('float32', Float32Array.from(audio), [batch, samples]) };
    if (this.streaming) feeds.state = new Tensor('float32', Float32Array.from(state), [batch, this.stateSize]);
    const out = await this.session.run(feeds);
    return {
      scores: Float32Array.from(out[this.outputNames[0]].data),
      state: this.streaming ? Float32Array.from(out[this.outputNames[1]].data) : null,
    };
  }
}

/** Python's round(): halves go to the even neighbour. */
function roundHalfEven(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

// ─── detection: app/detection.py, row by row ───

/** A threshold (one number, or {keyword: number} naming every keyword) → one number per keyword. */
export function checkThreshold(threshold, keywords) {
  let values = keywords.map(() => threshold);
  if (threshold !== null && typeof threshold === 'object') {
    const names = Object.keys(threshold);
    if (names.length !== keywords.length || keywords.some((k) => !(k in threshold))) {
      throw new RangeError(`expected a threshold for each keyword ${JSON.stringify(keywords)}, got ${JSON.stringify(threshold)}`);
    }
    values = keywords.map((k) => threshold[k]);
  }
  values.forEach((v, i) => {
    if (typeof v !== 'number' || !(v > 0 && v <= 1)) {
      const of = typeof threshold === 'object' && threshold !== null ? ` for '${keywords[i]}'` : '';
      throw new RangeError(`expected a threshold in (0, 1], got ${v}${of}`);
    }
  });
  return values;
}

export function checkSettings({ smoothing, minHops, refractoryS, flushS = 0 }) {
  for (const [name, value] of [['smoothing', smoothing], ['minHops', minHops]]) {
    if (!Number.isInteger(value) || value < 1) {
      throw new RangeError(`expected ${name} as a whole number of hops ≥ 1, got ${value}`);
    }
  }
  if (!(refractoryS >= 0)) throw new RangeError(`expected refractoryS ≥ 0 seconds, got ${refractoryS}`);
  if (!(flushS >= 0)) throw new RangeError(`expected flushS ≥ 0 seconds, got ${flushS}`);
}

/**
 * Score rows → detections, state carried between calls. Every hop (one row of probabilities):
 *
 * 1. smooth: the mean of the last `smoothing` rows (fewer at the start of a stream);
 * 2. the best keyword of the smoothed row is a candidate when its score ≥ its `threshold` (one
 *    number for every keyword, or {keyword: number}: a model's calibrated operating point);
 * 3. a run of `minHops` consecutive hops with the same candidate fires one detection, at the hop
 *    that completes the run, with that hop's smoothed score; a longer run fires nothing more;
 * 4. refractory: no detection of any keyword within `refractoryS` seconds after one.
 */
export class Detector {
  constructor(labels, keywords, settings = {}) {
    const s = { ...DETECTION_DEFAULTS, ...settings };
    checkSettings(s);
    this.labels = [...labels];
    if (!keywords.length || keywords.some((k) => !this.labels.includes(k))) {
      throw new RangeError(`expected keywords among the labels ${JSON.stringify(this.labels)}, got ${JSON.stringify(keywords)}`);
    }
    this.keywords = [...keywords];
    this._columns = this.keywords.map((k) => this.labels.indexOf(k));
    this.threshold = s.threshold;
    this.smoothing = s.smoothing;
    this.minHops = s.minHops;
    this.refractoryS = s.refractoryS;
    this.reset();
  }

  /** One number when every keyword has the same threshold, else {keyword: threshold}. */
  get threshold() {
    const t = this._thresholds;
    return t.every((v) => v === t[0]) ? t[0] : Object.fromEntries(this.keywords.map((k, i) => [k, t[i]]));
  }

  set threshold(value) { this._thresholds = checkThreshold(value, this.keywords); }

  get settings() {
    return { threshold: this.threshold, smoothing: this.smoothing, minHops: this.minHops, refractoryS: this.refractoryS };
  }

  reset() {
    this._history = [];                  // the last smoothing − 1 rows, for the moving average
    this._candidate = -1;                // keyword index of the current run
    this._run = 0;                       // its length in hops
    this._lastFired = -Infinity;         // time of the last detection
  }

  /** times: seconds, increasing; scores: one row (classes) per time → [{keyword, timeS, score}]. */
  update(times, scores) {
    if (times.length !== scores.length) {
      throw new RangeError(`expected one score row per time, got ${scores.length} rows for ${times.length} times`);
    }
    const out = [];
    for (let i = 0; i < times.length; i++) {
      if (scores[i].length !== this.labels.length) {
        throw new RangeError(`expected rows of ${this.labels.length} scores, got ${scores[i].length}`);
      }
      const fired = this._step(times[i], this._smooth(scores[i]));
      if (fired) out.push(fired);
    }
    return out;
  }

  _smooth(row) {
    const window = [...this._history, row];
    const smooth = this._columns.map((c) => window.reduce((sum, r) => sum + r[c], 0) / window.length);
    this._history = window.slice(Math.max(0, window.length - (this.smoothing - 1)));
    return smooth;
  }

  _step(t, row) {
    let best = 0;
    for (let k = 1; k < row.length; k++) if (row[k] > row[best]) best = k;
    if (row[best] < this._thresholds[best]) {
      this._candidate = -1;
      this._run = 0;
      return null;
    }
    this._run = best === this._candidate ? this._run + 1 : 1;
    this._candidate = best;
    if (this._run !== this.minHops || t - this._lastFired < this.refractoryS) return null;
    this._lastFired = t;
    return { keyword: this.keywords[best], timeS: t, score: row[best] };
  }
}

// ─── the spotter: one stream's state, hop buffer and detector ───

/** Samples as they come (Float32Array/Float64Array in [−1, 1], Int16Array, Int32Array, or an array
 * of numbers), mono → Float32Array in [−1, 1]; a clear RangeError for what cannot be audio. */
export function toMonoFloat32(audio) {
  const kind = audio?.constructor?.name;
  let x;
  if (kind in INT_FULL_SCALE) x = Float32Array.from(audio, (v) => v / INT_FULL_SCALE[kind]);
  else if (audio instanceof Float32Array || audio instanceof Float64Array || Array.isArray(audio)) x = Float32Array.from(audio);
  else throw new TypeError(`expected mono samples as a Float32Array, Float64Array, Int16Array or Int32Array, got ${describe(audio)}`);
  let peak = 0;
  for (const v of x) {
    if (!Number.isFinite(v)) throw new RangeError(`expected finite samples, got NaN or Inf in ${describe(audio)}`);
    peak = Math.max(peak, Math.abs(v));
  }
  if (peak > FLOAT_PEAK_LIMIT) {
    throw new RangeError(`expected float samples in [−1, 1], got a peak of ${peak.toPrecision(4)} in ` +
      `${describe(audio)} (pass integer PCM as an Int16Array, not as floats)`);
  }
  return x;
}

function describe(value) {
  const kind = value?.constructor?.name ?? typeof value;
  return value?.length !== undefined ? `${kind}(${value.length})` : kind;
}

function concat(a, b) {
  if (!a.length) return b;
  const out = new Float32Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/**
 * The keywords a spotter listens for (app/spotter.py's `listened`): undefined → all the model's;
 * else a name or names among them, in the model's order.
 */
export function listened(model, keywords) {
  if (keywords === undefined || keywords === null) return [...model.keywords];
  const chosen = typeof keywords === 'string' ? [keywords] : Array.from(keywords);
  if (!chosen.length || new Set(chosen).size !== chosen.length || chosen.some((k) => !model.keywords.includes(k))) {
    throw new RangeError(`expected one or more of the model's keywords ${JSON.stringify(model.keywords)}, each once, ` +
      `got ${JSON.stringify(chosen)}`);
  }
  return model.keywords.filter((k) => chosen.includes(k));
}

/**
 * One stream's spotter: model state, hop buffer and detector (app/spotter.py's KeywordSpotter).
 *
 * options: keywords (the ones to listen for, default all the model's; the others never fire),
 * threshold, smoothing, minHops, refractoryS, flushS; those left out come from the model's
 * `detection` metadata, else DETECTION_DEFAULTS. `process` and `flush` return promises of
 * {times: Float64Array (s since reset, end of each hop), scores: [Float32Array(classes)],
 * detections: [{keyword, timeS, score}]}; calls run one after another in the order made.
 */
export class KeywordSpotter {
  constructor(model, options = {}) {
    if (!(model instanceof KeywordModel)) throw new TypeError('expected a KeywordModel (await KeywordModel.load(ort, source))');
    this.model = model;
    const fromModel = {};
    for (const [key, name] of Object.entries(METADATA_DETECTION_KEYS)) {
      if (model.detection?.[key] !== undefined) fromModel[name] = model.detection[key];
    }
    const given = Object.fromEntries(Object.entries(options).filter(([k, v]) => k in DETECTION_DEFAULTS && v !== undefined));
    const { flushS, ...rule } = { ...DETECTION_DEFAULTS, ...fromModel, ...given };
    checkSettings({ ...rule, flushS });
    this.keywords = listened(model, options.keywords);
    if (rule.threshold !== null && typeof rule.threshold === 'object') {   // per keyword: those listened for
      rule.threshold = Object.fromEntries(Object.entries(rule.threshold).filter(([k]) => this.keywords.includes(k)));
    }
    this.flushS = flushS;
    this.detector = new Detector(model.labels, this.keywords, rule);
    this._queue = Promise.resolve();
    this._reset();
  }

  get threshold() { return this.detector.threshold; }
  set threshold(value) { this.detector.threshold = value; }
  get settings() { return this.detector.settings; }
  get hopS() { return this.model.hopSamples / this.model.sampleRate; }

  /** Start a new stream (after the calls already made): silence before it, time 0 at its first sample. */
  reset() { return this._enqueue(() => this._reset()); }

  /** Feed samples at the model's rate; score every hop they complete. `sampleRate`, when given, is checked. */
  process(audio, sampleRate = this.model.sampleRate) {
    if (sampleRate !== this.model.sampleRate) {
      return Promise.reject(new RangeError(`expected audio at ${this.model.sampleRate} Hz, got ${sampleRate} Hz: ` +
        'resample before process() (resample.js does it as a stream)'));
    }
    let mono;
    try {
      mono = toMonoFloat32(audio);
    } catch (e) {
      return Promise.reject(e);
    }
    return this._enqueue(() => this._consume(mono));
  }

  /** End of the stream: score what the hop buffer still holds, padded with zeros to the input
   * multiple (one last, shorter hop); then `flushS` of silence, whose rows are not returned but
   * whose detections are, at the time the input ended (a keyword said at the very end is still
   * heard). Call reset() before another stream. */
  flush() { return this._enqueue(() => this._flush()); }

  _enqueue(job) {
    const result = this._queue.then(job);
    this._queue = result.catch(() => {});   // one failed call does not block the next
    return result;
  }

  _reset() {
    this.detector.reset();
    this._forget();
    this._pending = new Float32Array(0);                          // samples not yet in a hop
    this._samplesDone = 0;                                        // samples scored since reset
  }

  /** The model's memory back to silence: the zero state (clip models: a window of zeros). */
  _forget() {
    this._state = this.model.initialState();
    this._window = new Float32Array(this.model.maxSamples);       // clip models: the last maxSamples
  }

  /** flush()'s job, in the queue. */
  async _flush() {
    let result = emptyResult();
    const rest = this._pending.length;
    if (rest > 0) {
      const m = this.model.inputMultiple;
      const padded = new Float32Array(Math.ceil(rest / m) * m);
      padded.set(this._pending);
      this._pending = new Float32Array(0);
      result = await this._scoreHops(padded, padded.length, rest);
    }
    const endS = this._samplesDone / this.model.sampleRate;
    const hop = this.model.hopSamples;
    const hops = Math.round(this.flushS / this.hopS);
    const tail = await this._scoreHops(new Float32Array(hops * hop), hop, hop);
    this._samplesDone -= hops * hop;                         // the silence was not input
    const heard = tail.detections.map((d) => ({ ...d, timeS: endS }));
    return { ...result, detections: [...result.detections, ...heard] };
  }

  /** process()'s job, in the queue. */
  async _consume(audio) {
    this._pending = concat(this._pending, audio);
    const hop = this.model.hopSamples;
    const n = Math.floor(this._pending.length / hop) * hop;
    const whole = this._pending.subarray(0, n);
    this._pending = this._pending.slice(n);
    return this._scoreHops(whole, hop, hop);
  }

  /** Score `audio` in hops of `hop` samples, each advancing time by `advance` samples. */
  async _scoreHops(audio, hop, advance) {
    const times = [], scores = [];
    for (let start = 0; start < audio.length; start += hop) {
      scores.push(await this._scoreOne(audio.subarray(start, start + hop)));
      this._samplesDone += advance;
      times.push(this._samplesDone / this.model.sampleRate);
    }
    return { times: Float64Array.from(times), scores, detections: this.detector.update(times, scores) };
  }

  async _scoreOne(hop) {
    if (this.model.streaming) {
      const { scores, state } = await this.model.run(hop, this._state);
      this._state = state;
      return scores;
    }
    this._window.copyWithin(0, hop.length);
    this._window.set(hop, this._window.length - hop.length);
    return (await this.model.run(this._window, null)).scores;
  }
}

function emptyResult() {
  return { times: new Float64Array(0), scores: [], detections: [] };
}

// ─── two stages: a wake word, then a command (app/twostage.py) ───

export const WINDOW_S = 3.0;            // the command window after a wake word (Porcupine + Rhino: a few seconds)
export const COMMAND_CONFIDENT = 0.9;   // a command's smoothed probability that closes the window at once …
export const COMMAND_THRESHOLD = 0.4;   // … else its peak in the window must reach this (BENCHMARKS.md, commands)
export const COMMAND_STATES = Object.freeze(['reset', 'carried']);
export const COMMAND_STATE = 'reset';   // the command model runs inside windows only (BENCHMARKS.md, commands)

/**
 * One stream's two-stage spotter (app/twostage.py's WakeCommandSpotter): two rotkws models on the
 * same hops; `this.model` and `this.detector` are the wake word's, `this.commands` the command
 * model's KeywordSpotter. Hop by hop:
 *
 * 1. the wake model scores the hop, its state carried, and its detector takes the row;
 * 2. the command model scores it too when commandState is 'carried' or a window is open (else
 *    its row is NaN);
 * 3. in an open window, the command detector (fresh at each window, COMMAND_CONFIDENT as its
 *    threshold) takes that row: its first detection closes the window with that command; else,
 *    after windowHops hops (windowS rounded to hops), the window closes with the command whose
 *    smoothed score peaked highest in it (the first such hop and keyword on a tie), at that hop,
 *    if the peak reached commandThreshold and no other keyword of the command model scored
 *    higher there, else with command null;
 * 4. else a wake detection opens a window (and is reported): the command detector restarts and,
 *    with commandState 'reset', the command model's memory goes back to silence. Wake detections
 *    while a window is open are not reported; when the window closes, the wake detector restarts.
 *
 * flush() is KeywordSpotter's for both models; a window still open after it closes as at its
 * last hop; times in the flushed silence are the time the input ended.
 *
 * options: windowS (default: the wake model's `detection.window_s` metadata, else WINDOW_S),
 * commandState (COMMAND_STATES), commandKeywords (default all the command model's),
 * commandThreshold (default COMMAND_THRESHOLD), commandConfident (default COMMAND_CONFIDENT),
 * commandSmoothing, commandMinHops (default the command model's metadata, else
 * DETECTION_DEFAULTS); the others (keywords, threshold, smoothing, minHops, refractoryS, flushS)
 * are the wake word's, as for KeywordSpotter. `process` and `flush` return promises of
 * KeywordSpotter's result (the wake model's times and scores, the wake detections that opened
 * windows) and commandScores: [Float32Array(command classes)] (NaN where the command model did
 * not run), events: [{wake, timeS, score, command, commandTimeS, commandScore}] (the windows
 * closed in this call; the command's fields null when none was heard), windowOpen.
 */
export class WakeCommandSpotter extends KeywordSpotter {
  constructor(wake, commands, options = {}) {
    super(wake, options);
    const { commandState = COMMAND_STATE, commandKeywords, commandThreshold = COMMAND_THRESHOLD,
      commandConfident = COMMAND_CONFIDENT, commandSmoothing, commandMinHops } = options;
    if (!(commands instanceof KeywordModel)) {
      throw new TypeError('expected the command model as a KeywordModel (await KeywordModel.load(ort, source))');
    }
    this.commandModel = commands;
    if (!COMMAND_STATES.includes(commandState)) {
      throw new RangeError(`expected commandState in ${JSON.stringify(COMMAND_STATES)}, got ${JSON.stringify(commandState)}`);
    }
    this.commandState = commandState;
    for (const name of ['sampleRate', 'hopSamples', 'inputMultiple']) {
      if (commands[name] !== wake[name]) {
        throw new RangeError(`the command model's ${name} (${commands[name]}) is not the wake model's ` +
          `(${wake[name]}): they score the same hops`);
      }
    }
    this.windowS = windowSeconds(options.windowS, wake.detection);
    this.windowHops = Math.max(1, Math.round(this.windowS / this.hopS));
    this.commands = new KeywordSpotter(commands, { keywords: commandKeywords ?? undefined,
      threshold: commandConfident ?? undefined, smoothing: commandSmoothing ?? undefined,
      minHops: commandMinHops ?? undefined });
    [this.commandThreshold] = checkThreshold(commandThreshold, ['commandThreshold']);
    this._columns = commands.keywords.map((k) => commands.labels.indexOf(k));
    this._collect();
  }

  /** A command window is open (after the calls already finished). */
  get windowOpen() { return this._open !== null; }

  _reset() {
    super._reset();
    this.commands?._reset();              // undefined while KeywordSpotter's constructor runs
    this._open = null;                    // the wake detection whose window is open
    this._heard = [];                     // the window's [time, command row]
  }

  async _consume(audio) {
    this._collect();
    return this._result(await super._consume(audio));
  }

  async _flush() {
    this._collect();
    const result = await super._flush();
    const endS = this._samplesDone / this.model.sampleRate;
    if (this._open !== null) this._close(this._best());
    this._events = this._events.map((e) => ({ ...e, timeS: Math.min(e.timeS, endS),
      commandTimeS: e.commandTimeS === null ? null : Math.min(e.commandTimeS, endS) }));
    this._commandRows = this._commandRows.slice(0, result.times.length);   // the silence's rows are not returned
    return this._result(result);
  }

  _collect() {
    this._events = [];
    this._commandRows = [];
  }

  _result(r) {
    return { ...r, commandScores: this._commandRows, events: this._events, windowOpen: this.windowOpen };
  }

  /** Both models hop by hop, the window opened and closed between hops (the rule above). */
  async _scoreHops(audio, hop, advance) {
    const times = [], scores = [], heard = [];
    for (let start = 0; start < audio.length; start += hop) {
      const piece = audio.subarray(start, start + hop);
      const row = await this._scoreOne(piece);
      this._samplesDone += advance;
      const t = this._samplesDone / this.model.sampleRate;
      times.push(t);
      scores.push(row);
      const wake = this.detector.update([t], [row]);
      const runs = this.commandState === 'carried' || this._open !== null;
      const commandRow = runs ? await this.commands._scoreOne(piece)
        : new Float32Array(this.commandModel.labels.length).fill(NaN);
      this._commandRows.push(commandRow);
      if (this._open !== null) {
        this._heard.push([t, commandRow]);
        const sure = this.commands.detector.update([t], [commandRow]);
        if (sure.length) this._close(sure[0]);
        else if (this._heard.length >= this.windowHops) this._close(this._best());
      } else if (wake.length) {
        heard.push(wake[0]);
        this._open = wake[0];
        this._heard = [];
        this.commands.detector.reset();
        if (this.commandState === 'reset') this.commands._forget();
      }
    }
    return { times: Float64Array.from(times), scores, detections: heard };
  }

  /** The command listened for whose smoothed score peaked highest in the window (the first such
   * hop and keyword on a tie), if that peak reached commandThreshold and no other keyword of the
   * command model scored higher at that hop; else null. */
  _best() {
    const n = this.commands.detector.smoothing;
    const listened = this.commands.keywords.map((k) => this.commandModel.keywords.indexOf(k));   // now
    let best = null;
    this._heard.forEach(([t], i) => {
      const window = this._heard.slice(Math.max(0, i - n + 1), i + 1).map(([, row]) => row);
      const smooth = this._columns.map((c) => window.reduce((sum, row) => sum + row[c], 0) / window.length);
      const top = Math.max(...smooth);
      listened.forEach((k) => {
        if (best === null || smooth[k] > best.score) {
          best = { keyword: this.commandModel.keywords[k], timeS: t, score: smooth[k], top };
        }
      });
    });
    if (best === null || best.score < this.commandThreshold || best.score < best.top) return null;
    const { top, ...said } = best;
    return said;
  }

  _close(said) {
    const w = this._open;
    this._events.push({ wake: w.keyword, timeS: w.timeS, score: w.score, command: said?.keyword ?? null,
      commandTimeS: said?.timeS ?? null, commandScore: said?.score ?? null });
    this._open = null;
    this._heard = [];
    this.detector.reset();                // the wake word listens again, afresh
  }
}

/** The command window in seconds: given, else the wake model's metadata `window_s`, else WINDOW_S. */
function windowSeconds(given, detection) {
  const windowS = given ?? (detection && 'window_s' in detection ? detection.window_s : WINDOW_S);
  if (typeof windowS !== 'number' || !Number.isFinite(windowS) || !(windowS > 0)) {
    const shown = typeof windowS === 'string' ? JSON.stringify(windowS) : String(windowS);
    throw new RangeError(`expected windowS > 0 seconds, got ${shown}`);
  }
  return windowS;
}
