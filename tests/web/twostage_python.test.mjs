// app/web/rotkws.js's WakeCommandSpotter against app/twostage.py on the same real audio: the same
// hop times, wake words and events (wake, command, times exactly), scores within the reference's
// tolerance, the command model's rows NaN on the same hops.
//
// tests/test_web.py writes the Python side to a JSON file and runs this file with
// ROTKWS_TWOSTAGE_REFERENCE=<that file>; without it, the test skips. What was compared goes to
// the reference's `result` path.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

import * as ort from 'onnxruntime-node';

import { KeywordModel, WakeCommandSpotter } from '../../app/web/rotkws.js';
import { readWav } from './wav.mjs';

const REFERENCE = process.env.ROTKWS_TWOSTAGE_REFERENCE;
const skip = REFERENCE ? false : 'ROTKWS_TWOSTAGE_REFERENCE is not set: tests/test_web.py runs this with the Python reference';
const ref = REFERENCE ? JSON.parse(readFileSync(REFERENCE, 'utf8')) : null;

/** The audio through the spotter in `chunks`, each call awaited, then flush. */
async function spot(spotter, audio, chunks) {
  const results = [];
  for (let start = 0, i = 0; start < audio.length; start += chunks[i++ % chunks.length]) {
    results.push(await spotter.process(audio.subarray(start, start + chunks[i % chunks.length])));
  }
  results.push(await spotter.flush());
  const all = (key) => results.flatMap((r) => [...r[key]]);
  return { times: all('times'), scores: all('scores'), commandScores: all('commandScores'),
    detections: all('detections'), events: all('events'), windowOpen: results.at(-1).windowOpen };
}

/** max |Δ| over rows of scores; Python's null (NaN: the model did not run) must be NaN here. */
function maxAbsDiff(rows, expected, what) {
  assert.equal(rows.length, expected.length, `${rows.length} ${what} rows, expected ${expected.length}`);
  let worst = 0;
  rows.forEach((row, i) => {
    assert.equal(row.length, expected[i].length);
    row.forEach((v, j) => {
      const want = expected[i][j];
      assert.equal(Number.isNaN(v), want === null, `${what} row ${i}: ${v}, expected ${want ?? 'NaN'}`);
      if (want !== null) worst = Math.max(worst, Math.abs(v - want));
    });
  });
  return worst;
}

function assertClose(got, expected, tolerance, what) {
  if (expected === null) return assert.equal(got, null, what);
  assert.ok(Math.abs(got - expected) <= tolerance, `${what}: ${got}, expected ${expected} ± ${tolerance}`);
}

test('the JavaScript two-stage spotter reproduces the Python one', { skip }, async (t) => {
  const model = await KeywordModel.load(ort, ref.model);
  const spotter = new WakeCommandSpotter(model, model, ref.options);
  const got = await spot(spotter, readWav(ref.wav).samples, ref.chunks);
  const result = { hops: got.times.length, detections: got.detections.length, events: got.events.length,
    commands: got.events.filter((e) => e.command !== null).length, max_abs_diff: 0 };

  await t.test('settings: the window and both rules, as in Python', () => {
    assert.deepEqual({ windowS: spotter.windowS, windowHops: spotter.windowHops, commandState: spotter.commandState,
      wake: spotter.settings, commands: spotter.commands.settings }, ref.settings);
  });

  await t.test('hop times exactly, wake and command scores within the tolerance', () => {
    assert.deepEqual(got.times, ref.times);
    result.max_abs_diff = Math.max(maxAbsDiff(got.scores, ref.scores, 'wake score'),
      maxAbsDiff(got.commandScores, ref.command_scores, 'command score'));
    assert.ok(result.max_abs_diff <= ref.tolerance, `max |Δ score| = ${result.max_abs_diff}, expected ≤ ${ref.tolerance}`);
  });

  await t.test('the same wake words reported, at the same times', () => {
    assert.deepEqual(got.detections.map((d) => [d.keyword, d.timeS]), ref.detections.map((d) => [d.keyword, d.timeS]));
    got.detections.forEach((d, i) => assertClose(d.score, ref.detections[i].score, ref.tolerance, `detection ${i} score`));
  });

  await t.test('the same events: wake word, command, times exactly, scores within the tolerance', () => {
    const brief = (e) => [e.wake, e.timeS, e.command, e.commandTimeS];
    assert.deepEqual(got.events.map(brief), ref.events.map(brief));
    got.events.forEach((e, i) => {
      assertClose(e.score, ref.events[i].score, ref.tolerance, `event ${i} wake score`);
      assertClose(e.commandScore, ref.events[i].commandScore, ref.tolerance, `event ${i} command score`);
    });
    assert.equal(got.windowOpen, ref.window_open);
  });
  writeFileSync(ref.result, JSON.stringify(result, null, 1));
});
