// Opens the sealed fields of memstream record values with Node's own crypto and zlib (no
// packages): what docs/contracts.md ("Sealed fields") describes, runnable.
//
//   node open-sealed.mjs KEY_DIR < values.jsonl > opened.jsonl
//
// KEY_DIR is the erasure key directory (setting erasure.key_dir, default <data_dir>/keys):
// one file per cube, named by the SHA-256 of the cube id, holding its 32-byte key.
import { createDecipheriv, createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';

/** The sealed values a record's envelope holds (the function docs/contracts.md shows). */
export function openValues(envelope, key, cubeId) {  // key: the cube's 32-byte Buffer
  const data = Buffer.from(envelope.ct, 'base64url');  // ciphertext || 16-byte tag
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(envelope.iv, 'base64url'));
  decipher.setAAD(Buffer.from(cubeId, 'utf8'));
  decipher.setAuthTag(data.subarray(data.length - 16));
  let plain = Buffer.concat([decipher.update(data.subarray(0, data.length - 16)),
                             decipher.final()]);
  if (envelope.zip === 'deflate') plain = inflateRawSync(plain);
  return JSON.parse(plain.toString('utf8'));  // an array: element i is field {"$sealed": i}
}

/** Whether an envelope was sealed with this key (its kid: SHA-256 of the key, 16 hex). */
export function checkKey(envelope, key) {
  if (envelope.alg !== 'A256GCM') throw new Error(`unknown algorithm ${envelope.alg}`);
  const kid = createHash('sha256').update(key).digest('hex').slice(0, 16);
  if (envelope.kid !== kid) throw new Error(`sealed with key ${envelope.kid}, not ${kid}`);
}

/** The cube's key from a key directory (a missing file: the cube was erased). */
export function cubeKey(keyDir, cubeId) {
  const name = createHash('sha256').update(cubeId, 'utf8').digest('hex');
  return readFileSync(path.join(keyDir, `${name}.key`));
}

/** A decoded value with every sealed field put back, opened with its own cube's key. */
export function openValue(value, key) {
  if (!value || typeof value.$sealed !== 'object') return value;  // nothing sealed in it
  const { $sealed: envelope, ...rest } = value;
  checkKey(envelope, key);
  const values = openValues(envelope, key, value.cube_id);
  const back = (node) => {
    if (Array.isArray(node)) return node.map(back);
    if (node === null || typeof node !== 'object') return node;
    const keys = Object.keys(node);
    if (keys.length === 1 && keys[0] === '$sealed' && Number.isInteger(node.$sealed)) {
      return values[node.$sealed];
    }
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, back(v)]));
  };
  return back(rest);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const keyDir = process.argv[2];
  if (!keyDir) {
    console.error('usage: node open-sealed.mjs KEY_DIR < values.jsonl');
    process.exit(2);
  }
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const value = JSON.parse(line);
    const sealed = value && typeof value.$sealed === 'object';
    console.log(JSON.stringify(sealed ? openValue(value, cubeKey(keyDir, value.cube_id)) : value));
  }
}
