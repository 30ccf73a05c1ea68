// A mono WAV file → {samples: Float32Array in [−1, 1], sampleRate}: what Python's
// corpus.clips.read_audio gives for the same file (16-bit PCM ÷ 32768, 32-bit float as is).
import { readFileSync } from 'node:fs';

const FORMAT = { PCM: 1, FLOAT: 3, EXTENSIBLE: 0xfffe };

export function readWav(path) {
  const bytes = readFileSync(path);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tag = (at) => bytes.toString('latin1', at, at + 4);
  if (tag(0) !== 'RIFF' || tag(8) !== 'WAVE') throw new Error(`${path}: not a RIFF/WAVE file`);
  let fmt = null;
  for (let at = 12; at + 8 <= bytes.length; at += 8 + view.getUint32(at + 4, true) + (view.getUint32(at + 4, true) % 2)) {
    const size = view.getUint32(at + 4, true);
    if (tag(at) === 'fmt ') {
      fmt = { format: view.getUint16(at + 8, true), channels: view.getUint16(at + 10, true),
        sampleRate: view.getUint32(at + 12, true), bits: view.getUint16(at + 22, true) };
      if (fmt.format === FORMAT.EXTENSIBLE) fmt.format = view.getUint16(at + 32, true);
    } else if (tag(at) === 'data') {
      if (!fmt) throw new Error(`${path}: data before fmt`);
      return { samples: decode(view, at + 8, size, fmt, path), sampleRate: fmt.sampleRate };
    }
  }
  throw new Error(`${path}: no data chunk`);
}

function decode(view, start, size, { format, channels, bits }, path) {
  if (channels !== 1) throw new Error(`${path}: expected mono, got ${channels} channels`);
  const pcm16 = format === FORMAT.PCM && bits === 16, float32 = format === FORMAT.FLOAT && bits === 32;
  if (!pcm16 && !float32) throw new Error(`${path}: expected 16-bit PCM or 32-bit float, got format ${format}, ${bits} bits`);
  const out = new Float32Array(Math.floor(size / (bits / 8)));
  for (let i = 0; i < out.length; i++) {
    out[i] = pcm16 ? view.getInt16(start + 2 * i, true) / 32768 : view.getFloat32(start + 4 * i, true);
  }
  return out;
}
