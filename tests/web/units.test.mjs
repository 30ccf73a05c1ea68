// app/web/ without a model: the protobuf metadata reader, the detection rules, the hop buffer
// (over a stand-in session), audio checks and the streaming resampler. `npm test` runs these.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Detector, KeywordModel, KeywordSpotter, ModelError, readOnnxMetadata, toMonoFloat32 }
  from '../../app/web/rotkws.js';
import { StreamResampler } from '../../app/web/resample.js';

// ─── protobuf ───

const varint = (n) => {
  const out = [];
  for (; n >= 128; n = Math.floor(n / 128)) out.push((n % 128) | 128);
  return [...out, n];
};
const bytesField = (field, bytes) => [...varint(field * 8 + 2), ...varint(bytes.length), ...bytes];
const text = (s) => [...new TextEncoder().encode(s)];
const entry = (k, v) => bytesField(14, [...bytesField(1, text(k)), ...bytesField(2, text(v))]);

test('metadata_props are read from the top-level ModelProto only', () => {
  const graph = bytesField(7, [...bytesField(1, text('node')), ...entry('inside', 'the graph')]);
  const model = Uint8Array.from([
    ...varint(1 * 8), ...varint(10),                       // ir_version = 10
    ...bytesField(2, text('rotkws')),                       // producer_name
    ...varint(5 * 8), ...varint(2 ** 40),                   // model_version: a long varint
    ...graph,
    ...entry('labels', '["yes", "no"]'),
    ...varint(99 * 8 + 5), 1, 2, 3, 4,                      // an unknown fixed32 field
    ...entry('sample_rate', '16000'),
    ...varint(98 * 8 + 1), 1, 2, 3, 4, 5, 6, 7, 8,          // an unknown fixed64 field
    ...entry('émoji', 'γ ✓'),
  ]);
  assert.deepEqual(readOnnxMetadata(model), { labels: '["yes", "no"]', sample_rate: '16000', 'émoji': 'γ ✓' });
  assert.deepEqual(readOnnxMetadata(model.buffer), readOnnxMetadata(model));
  assert.throws(() => readOnnxMetadata(model.subarray(0, model.length - 3)), /truncated|past the end/);
});

test('a file that is not a rotkws model is refused with the reason', async () => {
  const ort = { InferenceSession: {}, Tensor: class {} };
  await assert.rejects(KeywordModel.load(ort, Uint8Array.from([0x0a, 0x05, 1])), (e) => e instanceof ModelError && /not an ONNX file/.test(e.message));
  const plain = Uint8Array.from([...varint(8), ...varint(10), ...entry('labels', '["yes"]')]);
  await assert.rejects(KeywordModel.load(ort, plain), /not a rotkws model: its metadata lacks sample_rate, input_multiple/);
  await assert.rejects(KeywordModel.load({}, plain), /expected the onnxruntime module/);
  await assert.rejects(KeywordModel.load(ort, '/nonexistent/kws12.onnx'), /no model at \/nonexistent\/kws12.onnx/);
});

// ─── detection: app/detection.py's rules, hand-checked ───

const LABELS = ['yes', 'no', '_silence_'];
const row = (yes, no) => [yes, no, 1 - yes - no];
const hops = (n) => Array.from({ length: n }, (_, i) => (i + 1) / 10);

test('smoothing, threshold, min hops: a run fires once, at the hop that completes it', () => {
  const d = new Detector(LABELS, ['yes', 'no'], { threshold: 0.5, smoothing: 2, minHops: 2, refractoryS: 0 });
  const scores = [row(0.9, 0), row(0.9, 0), row(0.9, 0), row(0, 0), row(0, 0), row(0, 0.8), row(0, 0.8), row(0, 0.8)];
  // smoothed yes: .9 .9 .9 .45 0 …; smoothed no: 0 0 0 0 0 .4 .8 .8 → yes fires at hop 2, no at hop 8
  const got = d.update(hops(8), scores);
  assert.deepEqual(got.map((x) => [x.keyword, x.timeS]), [['yes', 0.2], ['no', 0.8]]);
  assert.ok(Math.abs(got[0].score - 0.9) < 1e-12 && Math.abs(got[1].score - 0.8) < 1e-12);
});

test('refractory: nothing within refractoryS of a detection, whatever the keyword', () => {
  const d = new Detector(LABELS, ['yes', 'no'], { threshold: 0.5, smoothing: 1, minHops: 1, refractoryS: 0.35 });
  const scores = [row(0.9, 0), row(0, 0), row(0, 0.9), row(0, 0), row(0.9, 0)];
  assert.deepEqual(d.update(hops(5), scores).map((x) => [x.keyword, x.timeS]), [['yes', 0.1], ['yes', 0.5]]);
});

test('a change of candidate restarts the run; the same rows give the same detections however split', () => {
  const scores = [row(0.6, 0.3), row(0.3, 0.6), row(0.3, 0.6), row(0.7, 0.2), row(0.7, 0.2), row(0.7, 0.2)];
  const settings = { threshold: 0.55, smoothing: 1, minHops: 2, refractoryS: 0 };
  const whole = new Detector(LABELS, ['yes', 'no'], settings).update(hops(6), scores);
  assert.deepEqual(whole.map((x) => [x.keyword, x.timeS]), [['no', 0.3], ['yes', 0.5]]);
  const split = new Detector(LABELS, ['yes', 'no'], { ...settings });
  const pieces = [[0, 1], [1, 4], [4, 4], [4, 6]].flatMap(([a, b]) => split.update(hops(6).slice(a, b), scores.slice(a, b)));
  assert.deepEqual(pieces, whole);
});

test('bad detection settings are refused with what was expected', () => {
  const make = (s) => () => new Detector(LABELS, ['yes'], s);
  assert.throws(make({ threshold: 0 }), /threshold in \(0, 1\]/);
  assert.throws(make({ smoothing: 1.5 }), /smoothing as a whole number of hops ≥ 1/);
  assert.throws(make({ minHops: 0 }), /minHops as a whole number/);
  assert.throws(make({ refractoryS: -1 }), /refractoryS ≥ 0/);
  assert.throws(() => new Detector(LABELS, ['maybe']), /expected keywords among the labels/);
  const d = new Detector(LABELS, ['yes']);
  assert.throws(() => { d.threshold = 2; }, /threshold in \(0, 1\]/);
  assert.throws(() => d.update([0.1], [[0.5, 0.5]]), /rows of 3 scores/);
});

// ─── the spotter's hop buffer, over a stand-in session ───

/** A streaming "model" whose score row is [sum of the hop, its length, calls so far] / 1e6. */
function standInModel({ inputMultiple = 160, maxSamples = 16000, detection = {} } = {}) {
  let calls = 0;
  const session = {
    inputNames: ['audio', 'state'], outputNames: ['scores', 'state_out'],
    async run({ audio, state }) {
      calls += 1;
      const sum = audio.data.reduce((a, b) => a + b, 0);
      return { scores: { data: [sum / 1e6, audio.dims[1] / 1e6, state.data[0] / 1e6] },
        state_out: { data: Float32Array.from([state.data[0] + 1, 0]) } };
    },
  };
  const ort = { Tensor: class { constructor(type, data, dims) { Object.assign(this, { type, data, dims }); } } };
  const meta = { labels: ['a', 'b', '_silence_'], sampleRate: 16000, inputMultiple, maxSamples, streaming: true,
    stateSize: 2, detection };
  return new KeywordModel(ort, session, {}, meta, 'stand-in');
}

test('audio is scored in 100 ms hops with the state carried; flush pads the rest', async () => {
  const model = standInModel();
  assert.equal(model.hopSamples, 1600);
  const spotter = new KeywordSpotter(model);
  const first = await spotter.process(new Float32Array(1000).fill(0.001));   // no hop yet
  assert.equal(first.times.length, 0);
  const second = await spotter.process(new Int16Array(2700).fill(16384));   // 3700 samples: 2 hops
  assert.deepEqual([...second.times], [0.1, 0.2]);
  assert.deepEqual(second.scores.map((r) => Math.round(r[1] * 1e6)), [1600, 1600]);
  assert.deepEqual(second.scores.map((r) => Math.round(r[2] * 1e6)), [0, 1]);    // the state carried
  const last = await spotter.flush();                                            // 500 → 640 samples
  assert.deepEqual([...last.times], [(3200 + 500) / 16000]);
  assert.equal(Math.round(last.scores[0][1] * 1e6), 640);
  assert.ok(Math.abs(last.scores[0][0] * 1e6 - 500 * 0.5) < 1e-3);
  await spotter.reset();
  assert.deepEqual([...(await spotter.process(new Float32Array(1600))).times], [0.1]);
});

test('calls run in the order made, without awaiting each', async () => {
  const spotter = new KeywordSpotter(standInModel());
  const pieces = Array.from({ length: 7 }, (_, i) => spotter.process(new Float32Array(700).fill(i / 10)));
  const times = (await Promise.all(pieces)).flatMap((r) => [...r.times]);
  assert.deepEqual(times, [0.1, 0.2, 0.3]);
});

test('the hop follows the input multiple; settings come from the metadata unless given', () => {
  assert.equal(standInModel({ inputMultiple: 400 }).hopSamples, 1600);
  assert.equal(standInModel({ inputMultiple: 480 }).hopSamples, 1440);      // round(3.33) · 480
  assert.equal(standInModel({ inputMultiple: 640 }).hopSamples, 1280);      // round(2.5) = 2, as in Python
  assert.equal(standInModel({ inputMultiple: 1, maxSamples: 1000 }).hopSamples, 1000);
  const model = standInModel({ detection: { threshold: 0.8, min_hops: 3, note: 'ignored' } });
  assert.deepEqual(new KeywordSpotter(model).settings, { threshold: 0.8, smoothing: 3, minHops: 3, refractoryS: 1 });
  assert.deepEqual(new KeywordSpotter(model, { threshold: 0.6, refractoryS: 0.5 }).settings,
    { threshold: 0.6, smoothing: 3, minHops: 3, refractoryS: 0.5 });
});

test('a spotter listens for the keywords it is given, with their thresholds; others are refused', () => {
  const model = standInModel({ detection: { threshold: { a: 0.7, b: 0.8 } } });
  assert.deepEqual(new KeywordSpotter(model).keywords, ['a', 'b']);
  const some = new KeywordSpotter(model, { keywords: ['b'] });
  assert.deepEqual([some.keywords, some.detector.keywords, some.threshold], [['b'], ['b'], 0.8]);
  assert.deepEqual(new KeywordSpotter(model, { keywords: 'a' }).keywords, ['a']);
  assert.deepEqual(new KeywordSpotter(model, { keywords: ['b', 'a'] }).keywords, ['a', 'b']);    // the model's order
  for (const keywords of [[], ['c'], ['_silence_'], ['a', 'a']]) {
    assert.throws(() => new KeywordSpotter(model, { keywords }), /expected one or more of the model's keywords \["a","b"\], each once/);
  }
});

test('audio that cannot be taken is refused, and the stream goes on', async () => {
  const spotter = new KeywordSpotter(standInModel());
  await assert.rejects(spotter.process(new Float32Array(10), 48000), /expected audio at 16000 Hz, got 48000 Hz: resample/);
  await assert.rejects(spotter.process(Float32Array.from([0, NaN])), /finite samples/);
  await assert.rejects(spotter.process(Float32Array.from([0, 12000])), /peak of 1\.200e\+4.*Int16Array/);
  await assert.rejects(spotter.process('noise'), /expected mono samples/);
  assert.deepEqual([...(await spotter.process(new Float32Array(1600))).times], [0.1]);
  assert.deepEqual([...toMonoFloat32(Int16Array.from([-32768, 16384]))], [-1, 0.5]);
});

test('one threshold per keyword: each keyword fires at its own', () => {
  const scores = [...Array(3).fill(row(0.6, 0.1)), ...Array(3).fill(row(0, 0)), ...Array(3).fill(row(0.1, 0.6))];
  const settings = { smoothing: 1, minHops: 2, refractoryS: 0 };
  const brief = (ds) => ds.map((x) => [x.keyword, Math.round(x.timeS * 10) / 10]);
  const d = new Detector(LABELS, ['yes', 'no'], { ...settings, threshold: { yes: 0.7, no: 0.5 } });
  assert.deepEqual(brief(d.update(hops(9), scores)), [['no', 0.8]]);          // yes stays under 0.7
  const e = new Detector(LABELS, ['yes', 'no'], { ...settings, threshold: { yes: 0.55, no: 0.65 } });
  assert.deepEqual(brief(e.update(hops(9), scores)), [['yes', 0.2]]);
  assert.deepEqual(d.threshold, { yes: 0.7, no: 0.5 });
  d.threshold = 0.6;                                                          // one number sets every keyword
  assert.equal(d.threshold, 0.6);
  const make = (threshold) => () => new Detector(LABELS, ['yes', 'no'], { ...settings, threshold });
  assert.throws(make({ yes: 0.5 }), /a threshold for each keyword \["yes","no"\]/);
  assert.throws(make({ yes: 0.5, no: 1.5 }), /threshold in \(0, 1\], got 1.5 for 'no'/);
});

// ─── the resampler ───

const sine = (n, rate, hz, phase = 0) => Float32Array.from({ length: n }, (_, i) => Math.sin(2 * Math.PI * hz * i / rate + phase));

function resampleInPieces(resampler, x, sizes) {
  const out = [];
  for (let start = 0, i = 0; start < x.length; i++) {
    out.push(...resampler.process(x.subarray(start, start + sizes[i % sizes.length])));
    start += sizes[i % sizes.length];
  }
  return Float32Array.from([...out, ...resampler.flush()]);
}

for (const [from, to] of [[48000, 16000], [44100, 16000], [22050, 16000], [8000, 16000], [16000, 16000]]) {
  test(`resampling ${from} → ${to} Hz keeps a 1 kHz tone, in time, whatever the chunking`, () => {
    const x = sine(from / 2, from, 1000);
    const whole = resampleInPieces(new StreamResampler(from, to), x, [x.length]);
    assert.equal(whole.length, Math.ceil(x.length * to / from));
    const pieces = resampleInPieces(new StreamResampler(from, to), x, [128, 1, 333, 4096]);
    assert.deepEqual(pieces, whole);
    const expected = sine(whole.length, to, 1000);
    const edge = 200;   // the tone starts and stops abruptly: skip the filter's ringing there
    let worst = 0;
    for (let i = edge; i < whole.length - edge; i++) worst = Math.max(worst, Math.abs(whole[i] - expected[i]));
    assert.ok(worst < 2e-3, `max error ${worst}`);
  });
}

test('resampling 48 → 16 kHz removes what 16 kHz cannot hold (no aliasing)', () => {
  const x = sine(48000, 48000, 12000);   // would fold onto 4 kHz
  const y = new StreamResampler(48000, 16000).process(x).subarray(500, 15000);
  const rms = Math.sqrt(y.reduce((s, v) => s + v * v, 0) / y.length);
  assert.ok(rms < 1e-3, `a 12 kHz tone leaves rms ${rms} (expected < 1e-3, −57 dB)`);
});
