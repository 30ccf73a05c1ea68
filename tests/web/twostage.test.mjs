// app/web/rotkws.js's WakeCommandSpotter (app/twostage.py's rule) on real clips, with the bundled
// kws12.onnx in onnxruntime-node as both models: `yes` is the wake word, left/right/stop the
// commands. The window's hops, the command model's state (reset or carried), flush, errors.
// tests/test_web.py compares the same class with the Python one (twostage_python.test.mjs).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import * as ort from 'onnxruntime-node';

import { COMMAND_CONFIDENT, COMMAND_STATE, COMMAND_STATES, COMMAND_THRESHOLD, KeywordModel, KeywordSpotter,
  WINDOW_S, WakeCommandSpotter } from '../../app/web/rotkws.js';
import { readWav } from './wav.mjs';

const MODEL = fileURLToPath(new URL('../../app/models/kws12.onnx', import.meta.url));
const CLIPS = fileURLToPath(new URL('../data/clips/', import.meta.url));
const skip = existsSync(MODEL) ? false : `${MODEL} is not there: these tests run the bundled model`;
const model = skip ? null : await KeywordModel.load(ort, MODEL);

const WAKE = { keywords: ['yes'], commandKeywords: ['left', 'right', 'stop'] };
const SURE = { ...WAKE, commandConfident: 0.5 };     // a command over 0.5 closes the window at once
const YES = 'yes/03401e93_nohash_0.wav', LEFT = 'left/0487ba9b_nohash_0.wav';
const CHUNKS = [1, 333, 4000, 1600, 7919];       // uneven pieces, as a stream may come

/** Clips (paths under tests/data/clips, 16 kHz) and seconds of silence, end to end. */
function stream(...parts) {
  const pieces = parts.map((p) => (typeof p === 'number' ? new Float32Array(Math.round(p * model.sampleRate))
    : readWav(CLIPS + p).samples));
  const out = new Float32Array(pieces.reduce((n, p) => n + p.length, 0));
  pieces.reduce((at, p) => { out.set(p, at); return at + p.length; }, 0);
  return out;
}

/** The audio through the spotter in `chunks` (the calls made without awaiting each), then flush. */
async function spot(spotter, audio, chunks = [audio.length]) {
  const calls = [];
  for (let start = 0, i = 0; start < audio.length; start += chunks[i++ % chunks.length]) {
    calls.push(spotter.process(audio.subarray(start, start + chunks[i % chunks.length])));
  }
  calls.push(spotter.flush());
  const results = await Promise.all(calls);
  const all = (key) => results.flatMap((r) => [...(r[key] ?? [])]);
  return { results, times: all('times'), scores: all('scores'), detections: all('detections'),
    commandScores: all('commandScores'), events: all('events') };
}

const ran = (row) => !Number.isNaN(row[0]);        // the command model scored this hop
const brief = (events) => events.map((e) => [e.wake, e.timeS, e.command]);

/** A model with the same session and other metadata (`changes` in KeywordModel's names). */
function withMeta(m, changes) {
  const meta = { labels: m.labels, sampleRate: m.sampleRate, inputMultiple: m.inputMultiple, maxSamples: m.maxSamples,
    streaming: m.streaming, stateSize: m.stateSize, detection: m.detection, ...changes };
  return new KeywordModel(m.ort, m.session, m.metadata, meta, `${m.name} with ${JSON.stringify(changes)}`);
}

test('a wake word opens a command window; the first command it is sure of closes it', { skip }, async () => {
  const audio = stream(0.5, YES, 0.6, LEFT, 1.0);
  const { windowHops } = new WakeCommandSpotter(model, model, WAKE);
  const got = await spot(new WakeCommandSpotter(model, model, SURE), audio);
  assert.equal(got.events.length, 1);
  const [e] = got.events;
  assert.deepEqual([e.wake, e.command], ['yes', 'left']);
  assert.deepEqual(got.detections, [{ keyword: 'yes', timeS: e.timeS, score: e.score }]);
  assert.ok(e.commandScore >= COMMAND_THRESHOLD, `command score ${e.commandScore}`);
  const w = got.times.indexOf(e.timeS), c = got.times.indexOf(e.commandTimeS);
  assert.ok(w >= 0 && c - w >= 1 && c - w <= windowHops, `wake at hop ${w}, command at hop ${c}`);
  assert.equal(got.commandScores.length, got.times.length);
  assert.deepEqual(got.commandScores.map(ran), got.times.map((_, i) => i > w && i <= c));   // reset: the window's hops only

  const spotter = new WakeCommandSpotter(model, model, SURE);                // the same, cut after the wake word
  const hop = model.hopSamples;
  const first = await spotter.process(audio.subarray(0, (w + 1) * hop));
  assert.deepEqual([first.windowOpen, spotter.windowOpen, first.events, first.detections.length], [true, true, [], 1]);
  const rest = await spotter.process(audio.subarray((w + 1) * hop));
  assert.deepEqual([rest.windowOpen, rest.events, rest.detections], [false, [e], []]);
});

test('a command it is not sure of: the window runs to its end, then the peak decides', { skip }, async () => {
  const audio = stream(0.5, YES, 0.6, LEFT, 4.0);
  const sure = (await spot(new WakeCommandSpotter(model, model, SURE), audio)).events;
  const got = await spot(new WakeCommandSpotter(model, model, { ...WAKE, commandConfident: 1 }), audio);
  assert.deepEqual(got.events.map((e) => e.command), ['left']);
  const [e] = got.events;
  assert.ok(e.commandScore >= sure[0].commandScore && e.commandScore >= COMMAND_THRESHOLD);   // the peak
  const w = got.times.indexOf(e.timeS), windowHops = 30;
  assert.deepEqual(got.commandScores.map(ran), got.times.map((_, i) => i > w && i <= w + windowHops));
  const none = await spot(new WakeCommandSpotter(model, model, { ...WAKE, commandConfident: 1, commandThreshold: 1 }), audio);
  assert.deepEqual(none.events.map((ev) => ev.command), [null]);
});

test('a window without a command closes after windowS (whole hops, at least one), command null', { skip }, async () => {
  const audio = stream(0.5, YES, 4.0);
  for (const [windowS, hops] of [[undefined, 30], [1.5, 15]]) {
    const spotter = new WakeCommandSpotter(model, model, { ...WAKE, windowS });
    assert.deepEqual([spotter.windowS, spotter.windowHops], [windowS ?? WINDOW_S, hops]);
    const got = await spot(spotter, audio, [4000]);
    assert.equal(got.events.length, 1, `windowS ${windowS}`);
    const [e] = got.events;
    assert.deepEqual([e.wake, e.command, e.commandTimeS, e.commandScore], ['yes', null, null, null]);
    const w = got.times.indexOf(e.timeS);
    assert.deepEqual(got.commandScores.map(ran), got.times.map((_, i) => i > w && i <= w + hops));
    const closing = got.results.findIndex((r) => r.times.includes(got.times[w + hops]));   // the call that closed it
    assert.deepEqual(got.results.map((r) => r.events.length), got.results.map((_, i) => Number(i === closing)));
  }
  const spotter = new WakeCommandSpotter(model, model, { ...WAKE, windowS: 0.04 });   // at least one hop
  assert.equal(spotter.windowHops, 1);
  const got = await spot(spotter, audio, [4000]);
  const w = got.times.indexOf(got.events[0].timeS);
  assert.equal(got.events[0].command, null);
  // one hop of window, then the wake detector starts afresh: min_hops (2) hops before it can fire again
  assert.deepEqual(got.commandScores.slice(w, w + 4).map(ran), [false, true, false, false]);
});

test('wake words while a window is open are not reported; after it the wake word listens again', { skip }, async () => {
  const audio = stream(0.5, YES, 0.5, YES, 4.0, YES, 4.0);
  const plain = await spot(new KeywordSpotter(model, { keywords: ['yes'] }), audio);
  assert.equal(plain.detections.length, 3, 'the second yes must fire on its own, or this tests nothing');
  const got = await spot(new WakeCommandSpotter(model, model, WAKE), audio);
  assert.deepEqual(got.detections, [plain.detections[0], plain.detections[2]]);
  assert.deepEqual(brief(got.events), [['yes', plain.detections[0].timeS, null], ['yes', plain.detections[2].timeS, null]]);
  assert.ok(plain.detections[1].timeS - plain.detections[0].timeS < WINDOW_S);

  const windowS = plain.detections[1].timeS - plain.detections[0].timeS;   // the window closes on the hop the
  const spotter = new WakeCommandSpotter(model, model, { ...WAKE, windowS });   // second yes fires: still not reported
  const [first, second] = plain.detections.map((d) => plain.times.indexOf(d.timeS));
  assert.equal(spotter.windowHops, second - first);
  const closing = await spot(spotter, audio);
  const events = brief(closing.events);
  assert.deepEqual(events[0], ['yes', plain.detections[0].timeS, null]);
  assert.deepEqual(events.at(-1), ['yes', plain.detections[2].timeS, null]);
  // the window closed on the hop the second yes fired; the wake detector started afresh there,
  // so a wake word in between comes min_hops (2) hops after that hop at the earliest
  const closedAt = plain.times[second];
  assert.ok(events.slice(1, -1).every((e) => e[1] >= closedAt + 2 * spotter.hopS - 1e-9), JSON.stringify(events));
});

test('every window has a fresh command detector: a 100 s refractory period does not reach the next one', { skip }, async () => {
  const commands = withMeta(model, { detection: { refractory_s: 100 } });
  const got = await spot(new WakeCommandSpotter(model, commands, WAKE), stream(0.5, YES, 0.6, LEFT, 1.0, YES, 0.6, LEFT, 1.0));
  assert.deepEqual(got.events.map((e) => e.command), ['left', 'left']);
});

test('carried: the command model scores every hop, its state never reset', { skip }, async () => {
  const audio = stream(0.5, YES, 0.6, LEFT, 1.0, YES, 4.0);
  const got = await spot(new WakeCommandSpotter(model, model, { ...WAKE, commandState: 'carried' }), audio);
  assert.deepEqual(brief(got.events).map((e) => e[2]), ['left', null]);
  const alone = await spot(new KeywordSpotter(model), audio);     // the command model on its own
  assert.deepEqual(got.commandScores, alone.scores);
  assert.deepEqual(got.commandScores, got.scores);                // … and it is the wake model here
});

test('reset: inside each window the command model runs from the zero state, outside it not at all', { skip }, async () => {
  const audio = stream(0.5, YES, 0.6, LEFT, 1.0, YES, 4.0);
  const spotter = new WakeCommandSpotter(model, model, SURE);
  assert.equal(spotter.commandState, COMMAND_STATE);
  const got = await spot(spotter, audio);
  const carried = await spot(new WakeCommandSpotter(model, model, { ...SURE, commandState: 'carried' }), audio);
  assert.equal(got.events.length, 2);
  const hop = model.hopSamples;
  const inside = got.times.map(() => false);
  for (const e of got.events) {
    const w = got.times.indexOf(e.timeS);
    const last = e.command === null ? w + spotter.windowHops : got.times.indexOf(e.commandTimeS);
    const fresh = await new KeywordSpotter(model).process(audio.subarray((w + 1) * hop, (last + 1) * hop));
    assert.deepEqual(got.commandScores.slice(w + 1, last + 1), fresh.scores);
    assert.notDeepEqual(got.commandScores[w + 1], carried.commandScores[w + 1]);   // the reset changed something
    for (let i = w + 1; i <= last; i++) inside[i] = true;
  }
  assert.deepEqual(got.commandScores.map(ran), inside);
});

test('flush: an open window closes with command null; times in the silence are the end of the input', { skip }, async () => {
  const spotter = new WakeCommandSpotter(model, model, WAKE);
  const open = await spotter.process(stream(0.5, YES, 0.5));     // 20 whole hops: nothing pending
  assert.deepEqual([open.windowOpen, open.events, open.detections.map((d) => d.timeS)], [true, [], [1.3]]);
  const end = await spotter.flush();
  assert.deepEqual([end.windowOpen, end.times.length, end.commandScores.length, brief(end.events)],
    [false, 0, 0, [['yes', 1.3, null]]]);

  const late = stream(0.5, YES).subarray(0, 19000);               // cut: the wake word fires in the silence
  const heard = await spot(new WakeCommandSpotter(model, model, WAKE), late);
  const endS = 19000 / 16000;
  assert.deepEqual([heard.times.at(-1), heard.detections.map((d) => [d.keyword, d.timeS])], [endS, [['yes', endS]]]);
  assert.deepEqual(brief(heard.events), [['yes', endS, null]]);
  assert.equal(heard.commandScores.length, heard.times.length);   // the silence's rows are not returned

  const said = stream(0.5, YES, 0.6, LEFT);                       // cut: the command is heard in the silence
  const command = await spot(new WakeCommandSpotter(model, model, WAKE), said.subarray(0, said.length - 5000));
  assert.deepEqual(brief(command.events), [['yes', 1.3, 'left']]);
  assert.equal(command.events[0].commandTimeS, (said.length - 5000) / 16000);
});

test('the same results however the audio is split and whatever came before reset()', { skip }, async () => {
  const audio = stream(0.5, YES, 0.6, LEFT, 1.0, YES, 4.0);
  for (const commandState of COMMAND_STATES) {
    const spotter = new WakeCommandSpotter(model, model, { ...WAKE, commandState });
    const whole = await spot(spotter, audio);
    assert.equal(whole.events.length, 2);
    await spotter.process(audio.subarray(0, 24000));              // a window open, the command model's state moved
    assert.ok(spotter.windowOpen);
    await spotter.reset();
    assert.ok(!spotter.windowOpen);
    const pieces = await spot(spotter, audio, CHUNKS);
    for (const key of ['times', 'scores', 'detections', 'commandScores', 'events']) {
      assert.deepEqual(pieces[key], whole[key], `${commandState}: ${key}`);
    }
  }
});

test('settings: the wake word\'s as KeywordSpotter\'s, the window the wake model\'s, the commands\' their own', { skip }, () => {
  assert.deepEqual([WINDOW_S, COMMAND_CONFIDENT, COMMAND_THRESHOLD, COMMAND_STATES, COMMAND_STATE],
    [3, 0.9, 0.4, ['reset', 'carried'], 'reset']);
  const wake = withMeta(model, { detection: { threshold: 0.9, window_s: 1.0 } });
  const commands = withMeta(model, { detection: { threshold: 0.8, smoothing: 5, min_hops: 4, refractory_s: 0.5 } });
  const plain = new WakeCommandSpotter(wake, commands);
  assert.deepEqual([plain.settings.threshold, plain.windowS, plain.windowHops, plain.commandState, plain.commandThreshold],
    [0.9, 1, 10, 'reset', COMMAND_THRESHOLD]);
  assert.deepEqual(plain.commands.settings, { threshold: COMMAND_CONFIDENT, smoothing: 5, minHops: 4, refractoryS: 0.5 });
  assert.deepEqual(plain.commands.keywords, model.keywords);
  const given = new WakeCommandSpotter(wake, commands, { windowS: 2, threshold: 0.7, commandThreshold: 0.5,
    commandConfident: 0.6, commandSmoothing: 2, commandMinHops: 1, commandKeywords: ['stop'] });
  assert.deepEqual([given.settings.threshold, given.windowHops, given.commands.keywords, given.commandThreshold],
    [0.7, 20, ['stop'], 0.5]);
  assert.deepEqual(given.commands.settings, { threshold: 0.6, smoothing: 2, minHops: 1, refractoryS: 0.5 });
  const theirs = new WakeCommandSpotter(wake, commands, { commandConfident: null });   // null: the command model's
  assert.equal(theirs.commands.threshold, 0.8);
  assert.equal(new WakeCommandSpotter(model, model).windowHops, 30);   // no window_s in its metadata: WINDOW_S
});

test('bad options and mismatched models are refused with what was expected', { skip }, () => {
  const make = (options, wake = model, commands = model) => () => new WakeCommandSpotter(wake, commands, options);
  assert.throws(make({ commandState: 'kept' }), /expected commandState in \["reset","carried"\], got "kept"/);
  for (const [windowS, shown] of [[0, '0'], [-1, '-1'], [NaN, 'NaN'], [Infinity, 'Infinity'], ['3', '"3"'], [true, 'true']]) {
    assert.throws(make({ windowS }), new RegExp(`^RangeError: expected windowS > 0 seconds, got ${shown}$`));
  }
  assert.throws(make({}, withMeta(model, { detection: { window_s: 0 } })), /expected windowS > 0 seconds, got 0/);
  assert.throws(make({}, model, withMeta(model, { sampleRate: 8000 })),
    /the command model's sampleRate \(8000\) is not the wake model's \(16000\): they score the same hops/);
  assert.throws(make({}, model, withMeta(model, { inputMultiple: 480 })),
    /the command model's hopSamples \(1440\) is not the wake model's \(1600\)/);
  assert.throws(make({}, model, MODEL), /^TypeError: expected the command model as a KeywordModel/);
  assert.throws(make({}, MODEL, model), /^TypeError: expected a KeywordModel/);
  assert.throws(make({ commandKeywords: ['yes', 'maybe'] }), /expected one or more of the model's keywords/);
  assert.throws(make({ commandSmoothing: 0 }), /smoothing as a whole number of hops ≥ 1/);
  assert.throws(make({ commandThreshold: 1.5 }), /threshold in \(0, 1\], got 1.5/);
  assert.throws(make({ commandConfident: 0 }), /threshold in \(0, 1\], got 0/);
  assert.throws(make({ threshold: 2 }), /threshold in \(0, 1\], got 2/);
});
