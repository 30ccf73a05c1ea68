// The JavaScript spotter (app/web/rotkws.js in onnxruntime-node) against the Python runtime on
// the same real audio: the same metadata, settings, hop times and detections, scores within the
// reference's tolerance.
//
// tests/test_web.py writes the Python side to a JSON file and runs this file with
// ROTKWS_WEB_REFERENCE=<that file>; without it, the test skips (`npm test` alone has no
// Python reference). The measured differences go to the reference's `result` path.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

import * as ort from 'onnxruntime-node';

import { StreamResampler } from '../../app/web/resample.js';
import { Detector, KeywordModel, KeywordSpotter } from '../../app/web/rotkws.js';
import { readWav } from './wav.mjs';

const REFERENCE = process.env.ROTKWS_WEB_REFERENCE;
const skip = REFERENCE ? false : 'ROTKWS_WEB_REFERENCE is not set: tests/test_web.py runs this with the Python reference';
const ref = REFERENCE ? JSON.parse(readFileSync(REFERENCE, 'utf8')) : null;

function streamAudio({ clips, samples }) {
  const parts = clips.map((path) => readWav(path).samples);
  const audio = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    audio.set(p, at);
    at += p.length;
  }
  return audio.subarray(0, samples);
}

/** The stream through the spotter in `chunks`, first through resample.js if at another `rate`. */
async function spot(spotter, audio, chunks, rate) {
  await spotter.reset();
  const resampler = rate === spotter.model.sampleRate ? null : new StreamResampler(rate, spotter.model.sampleRate);
  const results = [];
  for (let start = 0, i = 0; start < audio.length; i++) {
    const n = chunks[i % chunks.length];
    const piece = audio.subarray(start, start + n);
    results.push(await spotter.process(resampler ? resampler.process(piece) : piece));
    start += n;
  }
  if (resampler) results.push(await spotter.process(resampler.flush()));
  results.push(await spotter.flush());
  return {
    times: results.flatMap((r) => [...r.times]),
    scores: results.flatMap((r) => r.scores),
    detections: results.flatMap((r) => r.detections),
  };
}

function maxAbsDiff(rows, expected) {
  assert.equal(rows.length, expected.length, `${rows.length} score rows, expected ${expected.length}`);
  let worst = 0;
  rows.forEach((row, i) => {
    assert.equal(row.length, expected[i].length);
    row.forEach((v, j) => { worst = Math.max(worst, Math.abs(v - expected[i][j])); });
  });
  return worst;
}

function assertSameDetections(got, expected, tolerance) {
  const brief = (ds) => ds.map((d) => `${d.keyword}@${(d.timeS ?? d.time_s).toFixed(3)}`);
  assert.deepEqual(brief(got), brief(expected));
  got.forEach((d, i) => {
    assert.ok(Math.abs(d.timeS - expected[i].time_s) < 1e-9, `detection ${i} at ${d.timeS} s, expected ${expected[i].time_s} s`);
    assert.ok(Math.abs(d.score - expected[i].score) <= tolerance, `detection ${i} score ${d.score}, expected ${expected[i].score}`);
  });
}

test('the JavaScript spotter reproduces the Python runtime', { skip }, async (t) => {
  const model = await KeywordModel.load(ort, ref.model);
  const result = { model: ref.model, cases: {}, max_abs_diff: 0, hops: 0, detections: 0 };

  await t.test('metadata: read from the protobuf as onnxruntime reads it', () => {
    assert.deepEqual(model.metadata, ref.metadata);
    const info = ref.model_info;
    assert.deepEqual(model.labels, info.labels);
    assert.deepEqual(model.keywords, info.keywords);
    assert.deepEqual([model.sampleRate, model.hopSamples, model.streaming, model.stateSize],
      [info.sample_rate, info.hop_samples, info.streaming, info.state_size]);
  });

  await t.test('detection settings: the model\'s metadata over the defaults, as in Python', () => {
    assert.deepEqual(new KeywordSpotter(model).settings, ref.default_settings);
    assert.deepEqual(new KeywordSpotter(model, ref.options).settings, ref.settings);
  });

  const spotter = new KeywordSpotter(model, ref.options);
  for (const c of ref.cases) {
    await t.test(`scores and detections: ${c.name}`, async () => {
      const audio = c.wav ? readWav(c.wav).samples : streamAudio(c);
      const got = await spot(spotter, audio, c.chunks, c.rate ?? model.sampleRate);
      assert.equal(got.times.length, c.times.length);
      got.times.forEach((time, i) => assert.ok(Math.abs(time - c.times[i]) < 1e-12, `hop ${i} ends at ${time} s, expected ${c.times[i]} s`));
      const diff = maxAbsDiff(got.scores, c.scores);
      const tolerance = c.tolerance ?? ref.tolerance;
      assert.ok(diff <= tolerance, `max |Δ score| = ${diff}, expected ≤ ${tolerance}`);
      result.cases[c.name] = { max_abs_diff: diff, hops: got.times.length, detections: got.detections.length };
      if (c.wav) return;   // another resampler: close scores, not the same audio (detections may differ)
      assertSameDetections(got.detections, c.detections, ref.tolerance);
      result.max_abs_diff = Math.max(result.max_abs_diff, diff);
      result.hops += got.times.length;
      result.detections += got.detections.length;
    });
  }

  for (const c of ref.detector_cases ?? []) {
    await t.test(`detector over a synthetic score track: ${c.name}`, () => {
      const detector = new Detector(c.labels, c.keywords, c.settings);
      const got = [];
      for (let start = 0, i = 0; start < c.times.length; i++) {
        const n = c.splits[i % c.splits.length];
        got.push(...detector.update(c.times.slice(start, start + n), c.scores.slice(start, start + n)));
        start += n;
      }
      assert.ok(c.detections.length > 0, 'the reference track fires nothing: it tests nothing');
      assertSameDetections(got, c.detections, 1e-12);
    });
  }
  if (ref.result) writeFileSync(ref.result, JSON.stringify(result, null, 1));
});
