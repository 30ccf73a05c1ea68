// app/web/cascade.js against app/cascade.py on the same real audio: the same confirmed wake words at
// the same times, scores within the reference's tolerance, however the audio is chunked.
//
// tests/test_cascade.py writes the Python side to a JSON file and runs this file with
// ROTKWS_CASCADE_REFERENCE=<that file>; without it, the test skips.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import * as ort from 'onnxruntime-node';

import { CascadeSpotter, MEL_BANDS, MEL_WINDOW, SpeechEmbedding, proposalWindow } from '../../app/web/cascade.js';
import { readWav } from './wav.mjs';

const REFERENCE = process.env.ROTKWS_CASCADE_REFERENCE;
const skip = REFERENCE ? false : 'ROTKWS_CASCADE_REFERENCE is not set: tests/test_cascade.py runs this with the Python reference';
const ref = REFERENCE ? JSON.parse(readFileSync(REFERENCE, 'utf8')) : null;

test('a proposal window: the head hops ending in (t − 0.3 s, t + 0.4 s]', () => {
  assert.deepEqual(proposalWindow(1.0), [8, 16]);      // hop 8 ends at 0.72 s, hop 16 at 1.36 s
  assert.deepEqual(proposalWindow(0.1), [0, 5]);
});

test('the JavaScript cascade reproduces the Python one', { skip }, async () => {
  const ears = await SpeechEmbedding.load(ort, ref.embedding);
  const cascade = await CascadeSpotter.load(ort, ref.wake, ears);
  const audio = readWav(ref.wav).samples;
  const found = [];
  for (let start = 0, i = 0; start < audio.length; i++) {
    const n = ref.chunks[i % ref.chunks.length];
    found.push(...(await cascade.process(audio.subarray(start, start + n))).detections);
    start += n;
  }
  found.push(...(await cascade.flush()).detections);
  assert.deepEqual(found.map((d) => [d.keyword, d.timeS]), ref.detections.map((d) => [d.keyword, d.timeS]));
  found.forEach((d, i) => assert.ok(Math.abs(d.score - ref.detections[i].score) <= ref.tolerance,
    `detection ${i}: score ${d.score}, expected ${ref.detections[i].score} ± ${ref.tolerance}`));
  assert.equal(cascade.hopsEmbedded, ref.hops_embedded);
});

test('the embedding of several windows in one call is each window\'s alone', { skip }, async () => {
  const ears = await SpeechEmbedding.load(ort, ref.embedding);
  const audio = readWav(ref.wav).samples;
  const windows = [0, 1, 2].map((i) => {
    const w = new Float32Array(MEL_WINDOW * MEL_BANDS);
    for (let f = 0; f < w.length; f++) w[f] = Math.log1p(Math.abs(audio[(i * 5003 + f * 7) % audio.length]) * 50);
    return w;
  });
  const together = await ears.vectors(windows);
  for (const [i, w] of windows.entries()) {
    const alone = await ears.vector(w);
    assert.equal(together[i].length, alone.length);
    alone.forEach((v, d) => assert.ok(Math.abs(v - together[i][d]) <= 1e-4, `window ${i}, dim ${d}: ${together[i][d]} vs ${v}`));
  }
  assert.ok(together[0].some((v, d) => Math.abs(v - together[1][d]) > 1e-3), 'different windows, different embeddings');
});
