// A wake word in two stages, as app/cascade.py runs it: the rotkws wake file proposes (its own
// rule at a permissive threshold), the head on Google's frozen speech embedding confirms, the
// embedding computed only for the head hops near a proposal. The wake file's metadata `verifier`
// names the head file and both thresholds (export/cascade.py).
//
//   const ears = await SpeechEmbedding.load(ort, 'models/speech_embedding/');
//   const cascade = await CascadeSpotter.load(ort, 'alexa.onnx', ears);   // reads its verifier
//   const { detections } = await cascade.process(samples16k);             // then flush()
import { KeywordModel, KeywordSpotter, ModelError, readOnnxMetadata } from './rotkws.js';

export const SAMPLE_RATE = 16000;
export const HOP = 1280;               // samples per embedding: 80 ms
export const MEL_PER_HOP = 8;          // mel frames per hop (10 ms each)
export const MEL_CONTEXT = 480;        // samples before a hop that its mel call also reads
export const MEL_BANDS = 32;
export const MEL_WINDOW = 76;          // mel frames per embedding
export const EMBED_DIM = 96;
export const INT16_SCALE = 32767;      // the mel model reads audio in int16's range
export const LOOKBACK_S = 0.3;         // head hops this long before a proposal may confirm it …
export const ARM_S = 0.4;              // … and this long after
const MEL_HOPS = Math.ceil(MEL_WINDOW / MEL_PER_HOP);
const EMBEDDING_FILES = ['melspectrogram.onnx', 'embedding_model.onnx'];

async function bytesOf(source) {
  const text = String(source);
  if (typeof process !== 'undefined' && process.versions?.node && !/^(https?|data|blob):/.test(text)) {
    const { readFile } = await import('node:fs/promises');
    try {
      return new Uint8Array(await readFile(text));
    } catch (e) {
      throw new ModelError(`no file at ${text} (${e.code ?? e.message})`);
    }
  }
  const response = await fetch(source);
  if (!response.ok) throw new ModelError(`no file at ${text} (HTTP ${response.status})`);
  return new Uint8Array(await response.arrayBuffer());
}

const ONE_THREAD = { graphOptimizationLevel: 'all', intraOpNumThreads: 1, executionMode: 'sequential' };

/** The embedding's two sessions (app/embedding.py), shared by every stream. */
export class SpeechEmbedding {
  /** `folder`: a path or URL ending in '/' holding melspectrogram.onnx and embedding_model.onnx. */
  static async load(ort, folder) {
    const [mel, embed] = await Promise.all(EMBEDDING_FILES.map(async (f) =>
      ort.InferenceSession.create(await bytesOf(String(folder) + f), ONE_THREAD)));
    const ears = new SpeechEmbedding(ort, mel, embed);
    ears.silenceMel = (await ears.mel(new Float32Array(MEL_CONTEXT + HOP))).slice(0, MEL_BANDS);
    return ears;
  }

  constructor(ort, mel, embed) { Object.assign(this, { ort, melSession: mel, embedSession: embed }); }

  /** (MEL_CONTEXT + HOP) samples in [−1, 1] → Float32Array of MEL_PER_HOP × MEL_BANDS scaled log-mel. */
  async mel(hopAudio) {
    const x = Float32Array.from(hopAudio, (v) => Math.fround(v * INT16_SCALE));
    const out = await this.melSession.run({ input: new this.ort.Tensor('float32', x, [1, x.length]) });
    return Float32Array.from(out[this.melSession.outputNames[0]].data, (v) => Math.fround(Math.fround(v / 10) + 2));
  }

  /** MEL_WINDOW × MEL_BANDS mel frames → Float32Array of EMBED_DIM. */
  async vector(window) { return (await this.vectors([Float32Array.from(window)]))[0]; }

  /** N windows of MEL_WINDOW × MEL_BANDS mel frames → N Float32Arrays of EMBED_DIM, in one call. */
  async vectors(windows) {
    const size = MEL_WINDOW * MEL_BANDS;
    const x = new Float32Array(windows.length * size);
    windows.forEach((w, i) => x.set(w, i * size));
    const out = await this.embedSession.run({
      input_1: new this.ort.Tensor('float32', x, [windows.length, MEL_WINDOW, MEL_BANDS, 1]) });
    const data = out[this.embedSession.outputNames[0]].data;
    return windows.map((_, i) => Float32Array.from(data.subarray(i * EMBED_DIM, (i + 1) * EMBED_DIM)));
  }
}

/** A head file (app/wakehead.py): the phrase's probability on the last `hops` embeddings. */
export class HeadModel {
  static async load(ort, source, ears) {
    const bytes = await bytesOf(source);
    const props = readOnnxMetadata(bytes);
    if (props.task !== '"embedding_head"') throw new ModelError(`${source}: expected a head file (metadata task "embedding_head"), got ${props.task}`);
    const head = new HeadModel(ort, await ort.InferenceSession.create(bytes, ONE_THREAD), props, ears);
    head.silence = await ears.vector(Array.from({ length: MEL_WINDOW }, () => [...ears.silenceMel]).flat());
    return head;
  }

  constructor(ort, session, props, ears) {
    Object.assign(this, { ort, session, ears });
    this.phrase = JSON.parse(props.labels)[0];
    this.hops = Number(props.head_hops);
  }

  /** hops × EMBED_DIM embeddings (Float32Array) → the phrase's probability. */
  async score(window) {
    const out = await this.session.run({ embeddings: new this.ort.Tensor('float32', window, [1, this.hops, EMBED_DIM]) });
    return out.score.data[0];
  }
}

/** The first and last head hop of a proposal at `t` seconds (hop k ends at (k + 1) HOP samples). */
export function proposalWindow(t) {
  const first = Math.floor((t - LOOKBACK_S) * SAMPLE_RATE / HOP + 1e-9);
  return [Math.max(first, 0), Math.floor((t + ARM_S) * SAMPLE_RATE / HOP + 1e-9) - 1];
}

export class CascadeSpotter {
  /** The wake file (path, URL or bytes) whose metadata names its verifier, beside it. */
  static async load(ort, source, ears) {
    return CascadeSpotter.of(ort, await KeywordModel.load(ort, source), source, ears);
  }

  /** A wake model already loaded from `source` (path or URL), its verifier's head read from beside it. */
  static async of(ort, wake, source, ears) {
    if (!wake.metadata.verifier) throw new ModelError(`${source}: no verifier in its metadata (expected a file export/cascade.py wrote)`);
    const verifier = JSON.parse(wake.metadata.verifier);
    const headSource = String(source).replace(/[^/?#]*([?#].*)?$/, verifier.head);
    let head;
    try {
      head = await HeadModel.load(ort, headSource, ears);
    } catch (e) {
      throw new ModelError(`${source} names ${JSON.stringify(verifier.head)} as its verifier: ${e.message} ` +
        '(expected the head file `rotkws enroll` writes beside the wake file)');
    }
    return new CascadeSpotter(wake, head, verifier.propose, verifier.confirm);
  }

  constructor(wake, head, propose, confirm) {
    this.spotter = new KeywordSpotter(wake, { threshold: propose });
    Object.assign(this, { head, confirm });
    this.keep = (head.hops + MEL_HOPS + Math.ceil((LOOKBACK_S + ARM_S) * SAMPLE_RATE / HOP) + 2) * HOP;
    this.reset();
  }

  get model() { return this.spotter.model; }
  get keywords() { return [this.head.phrase]; }
  get hopS() { return this.spotter.hopS; }
  get threshold() { return this.spotter.threshold; }     // the wake file's, for a proposal
  set threshold(value) { this.spotter.threshold = value; }

  reset() {
    this.spotter.reset();
    this.audio = new Float32Array(0);
    this.heard = 0;
    this.mels = new Map(); this.vectors = new Map(); this.scores = new Map();
    this.pending = [];
    this.lastFired = -Infinity;
    this.hopsEmbedded = 0;
  }

  /** 16 kHz mono float32 samples → {detections: [{keyword, timeS, score}], proposals, times, scores}:
   * the confirmed wake words, the number of proposals, and the wake file's hops as KeywordSpotter gives them. */
  async process(chunk) {
    const { times, scores, detections: proposals } = await this.spotter.process(chunk, SAMPLE_RATE);
    const joined = new Float32Array(this.audio.length + chunk.length);
    joined.set(this.audio);
    joined.set(chunk, this.audio.length);
    this.audio = joined;                                   // trimmed to `keep` once confirmed
    this.heard += chunk.length;
    this.pending.push(...proposals.map((d) => d.timeS));
    const detections = await this._confirm();
    this.audio = this.audio.slice(Math.max(0, this.audio.length - this.keep));
    return { detections, proposals: proposals.length, times, scores };
  }

  /** The end of a stream: enough silence for the last proposals' windows to close. */
  flush() {
    return this.process(new Float32Array(Math.ceil((ARM_S + 0.2) * SAMPLE_RATE / 1600) * 1600));
  }

  async _confirm() {
    const out = [];
    const nowHop = Math.floor(this.heard / HOP);
    for (const t of [...this.pending]) {
      const [first, last] = proposalWindow(t);
      let done = last <= nowHop - 1;
      for (let k = first; k <= Math.min(last, nowHop - 1); k++) {
        const score = await this._score(k);
        if (score >= this.confirm) {
          const when = Math.max(t, (k + 1) * HOP / SAMPLE_RATE);
          if (when - this.lastFired >= this.spotter.detector.refractoryS) {
            this.lastFired = when;
            out.push({ keyword: this.head.phrase, timeS: when, score });
          }
          done = true;
          break;
        }
      }
      if (done) this.pending.splice(this.pending.indexOf(t), 1);
    }
    this._forget(nowHop);
    return out;
  }

  _samples(lo, hi) {
    const start = this.heard - this.audio.length;
    if (lo >= 0 && lo < start) throw new Error(`samples from ${lo} are no longer kept (from ${start})`);
    const out = new Float32Array(hi - lo);
    const from = Math.max(lo, 0);
    out.set(this.audio.subarray(from - start, hi - start), from - lo);
    return out;
  }

  async _mel(k) {
    if (!this.mels.has(k)) {
      this.mels.set(k, k < 0 ? Float32Array.from({ length: MEL_PER_HOP * MEL_BANDS }, (_, i) => this.head.ears.silenceMel[i % MEL_BANDS])
        : await this.head.ears.mel(this._samples(k * HOP - MEL_CONTEXT, (k + 1) * HOP)));
    }
    return this.mels.get(k);
  }

  /** The embeddings of hops `missing` (none of them before the stream) in one call, as app/cascade.py's `_vectors`. */
  async _vectors(missing) {
    if (!missing.length) return;
    const windows = [];
    for (const j of missing) {
      const frames = new Float32Array(MEL_HOPS * MEL_PER_HOP * MEL_BANDS);
      for (let i = 0; i < MEL_HOPS; i++) frames.set(await this._mel(j - MEL_HOPS + 1 + i), i * MEL_PER_HOP * MEL_BANDS);
      windows.push(frames.subarray(frames.length - MEL_WINDOW * MEL_BANDS));
    }
    const got = await this.head.ears.vectors(windows);
    missing.forEach((j, i) => this.vectors.set(j, got[i]));
    this.hopsEmbedded += missing.length;
  }

  async _score(k) {
    if (!this.scores.has(k)) {
      const hops = Array.from({ length: this.head.hops }, (_, i) => k - this.head.hops + 1 + i);
      await this._vectors(hops.filter((j) => j >= 0 && !this.vectors.has(j)));
      const window = new Float32Array(this.head.hops * EMBED_DIM);
      hops.forEach((j, i) => window.set(j < 0 ? this.head.silence : this.vectors.get(j), i * EMBED_DIM));
      this.scores.set(k, await this.head.score(window));
    }
    return this.scores.get(k);
  }

  _forget(nowHop) {
    const oldest = nowHop - Math.floor(this.keep / HOP);
    for (const cache of [this.mels, this.vectors, this.scores]) {
      for (const k of [...cache.keys()]) if (k < oldest) cache.delete(k);
    }
  }
}
