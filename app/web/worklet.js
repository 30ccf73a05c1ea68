/**
 * The microphone → the model's sample rate, on the audio thread (an AudioWorklet module).
 *
 *   await context.audioWorklet.addModule('worklet.js');
 *   const node = new AudioWorkletNode(context, 'rotkws-microphone',
 *     { processorOptions: { targetRate: 16000, postSamples: 1600 } });
 *   node.port.onmessage = (e) => spotter.process(e.data);   // Float32Array @ targetRate, mono
 *
 * Channels are averaged to mono, resampled from the context's rate (the global `sampleRate`)
 * by resample.js, and posted in pieces of `postSamples` (one hop: 100 ms at 16 kHz).
 */
import { StreamResampler } from './resample.js';

class RotkwsMicrophone extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate, postSamples } = options.processorOptions;
    this.resampler = new StreamResampler(sampleRate, targetRate);
    this.piece = new Float32Array(postSamples);
    this.filled = 0;
  }

  process(inputs) {
    const channels = inputs[0];
    if (channels && channels.length) this.take(this.resampler.process(mono(channels)));
    return true;                         // keep running while the page listens
  }

  take(samples) {
    for (let i = 0; i < samples.length;) {
      const n = Math.min(samples.length - i, this.piece.length - this.filled);
      this.piece.set(samples.subarray(i, i + n), this.filled);
      this.filled += n;
      i += n;
      if (this.filled === this.piece.length) {
        const full = this.piece;
        this.piece = new Float32Array(full.length);
        this.port.postMessage(full, [full.buffer]);   // transferred: `full` is empty from here on
        this.filled = 0;
      }
    }
  }
}

function mono(channels) {
  if (channels.length === 1) return channels[0];
  const out = new Float32Array(channels[0].length);
  for (const channel of channels) for (let i = 0; i < out.length; i++) out[i] += channel[i] / channels.length;
  return out;
}

registerProcessor('rotkws-microphone', RotkwsMicrophone);
