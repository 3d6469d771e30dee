#!/usr/bin/env node
// memstream from Node, through Kafka alone: publish a conversation chunk, fetch the cube's
// data key over request/reply, read the memories the chunk became on memory.updates (their
// text unsealed here), then search. Usage (see README.md):
//   node memstream-example.mjs <bootstrap> <user-id> [--prefix memstream.] [--query TEXT]
import {
  constants, createCipheriv, createDecipheriv, createHash, generateKeyPairSync,
  privateDecrypt, randomBytes, randomUUID,
} from 'node:crypto';
import { parseArgs } from 'node:util';
import { inflateRawSync } from 'node:zlib';
import { CompressionTypes, Kafka, Partitioners, logLevel } from 'kafkajs';

const { positionals, values: opts } = parseArgs({
  allowPositionals: true,
  options: {
    prefix: { type: 'string', default: 'memstream.' },
    query: { type: 'string', default: 'What is the user allergic to?' },
    timeout: { type: 'string', default: '120' }, // seconds, for the whole run
  },
});
const [bootstrap, userId] = positionals;
if (!bootstrap || !userId) {
  console.error('usage: node memstream-example.mjs <bootstrap> <user-id> [--prefix P] [--query Q]');
  process.exit(2);
}
const cubeId = userId; // a user's default cube is named after the user
const topic = (suffix) => `${opts.prefix}${suffix}`;
const deadline = Date.now() + Number(opts.timeout) * 1000;

// ---------------------------------------------------------------- sealed fields (topics/sealing.py)
// A sealed field holds {"$sealed": i}; the values travel in the record's envelope
// "$sealed": {"alg":"A256GCM","kid":..,"iv":b64url,"ct":b64url(ciphertext||tag)[,"zip":"deflate"]}:
// AES-256-GCM with the cube's key, AAD = the cube id, plaintext = a JSON array of the values.
const kidOf = (key) => createHash('sha256').update(key).digest('hex').slice(0, 16);

export function decodeSealed(envelope, key, cubeId) {
  if (envelope.kid !== kidOf(key)) throw new Error(`sealed with key ${envelope.kid}, not ours`);
  const ct = Buffer.from(envelope.ct, 'base64url');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(envelope.iv, 'base64url'));
  decipher.setAAD(Buffer.from(cubeId, 'utf8'));
  decipher.setAuthTag(ct.subarray(ct.length - 16));
  let plain = Buffer.concat([decipher.update(ct.subarray(0, ct.length - 16)), decipher.final()]);
  if (envelope.zip === 'deflate') plain = inflateRawSync(plain);
  return JSON.parse(plain.toString('utf8')); // the record's sealed values, in reference order
}

// An event with its fields named in `fields` sealed: each replaced by {"$sealed": i}, the values
// in one envelope at the top of the event.
export function sealFields(event, key, cubeId, fields) {
  const values = [];
  const seal = (value) => { values.push(value); return { $sealed: values.length - 1 }; };
  const sealed = fields(event, seal);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(cubeId, 'utf8'));
  const ct = Buffer.concat([cipher.update(JSON.stringify(values), 'utf8'), cipher.final(),
    cipher.getAuthTag()]);
  return { ...sealed, $sealed: { alg: 'A256GCM', kid: kidOf(key), iv: iv.toString('base64url'),
    ct: ct.toString('base64url') } };
}

// A decoded event with its sealed fields put back (left as references without the key).
function openFields(event, key, cubeId) {
  if (!event?.$sealed || !key) return event;
  const values = decodeSealed(event.$sealed, key, cubeId);
  const back = (data) => {
    if (Array.isArray(data)) return data.map(back);
    if (data === null || typeof data !== 'object') return data;
    const keys = Object.keys(data);
    if (keys.length === 1 && keys[0] === '$sealed' && Number.isInteger(data.$sealed)) return values[data.$sealed];
    return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, back(v)]));
  };
  const { $sealed, ...rest } = event;
  return back(rest);
}
const shown = (text) => (typeof text === 'string' ? text.replaceAll('\n', ' | ') : '[sealed: no key]');

// ---------------------------------------------------------------- Kafka
const kafka = new Kafka({ clientId: 'memstream-node-example', brokers: [bootstrap], logLevel: logLevel.WARN });
// Java's (and aiokafka's) murmur2 partitioner: a cube's records land where Python's land.
const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
const consumer = kafka.consumer({ groupId: `memstream-node-example-${randomUUID()}` });

const now = () => new Date().toISOString();
const envelope = (fields) => ({
  schema_version: 1, event_id: randomUUID().replaceAll('-', ''), user_id: userId, cube_id: cubeId,
  occurred_at: now(), ...fields,
});

async function publish(suffix, type, event) {
  // CloudEvents' Kafka binding (binary mode), as memstream/kafka/headers.py writes them
  const headers = {
    'content-type': 'application/json', ce_specversion: '1.0', ce_id: event.event_id,
    ce_type: `memstream.${type}.v${event.schema_version}`, ce_source: 'memstream-node-example',
  };
  await producer.send({
    topic: topic(suffix), compression: CompressionTypes.GZIP, // batches gzip-compressed
    messages: [{ key: event.cube_id, value: JSON.stringify(event), headers }],
  });
}

// What the consumer has read: the chunk's items, the cube's updates by cause, pending replies.
const chunkId = randomUUID().replaceAll('-', '');
const items = new Map(); // event_id -> memory.items record of our chunk
const causes = new Map(); // cause_event_id -> [memory.updates record]
const seen = new Set(); // ce_id of every update read (redelivered records come again)
const pending = new Map(); // correlation_id -> resolve
let wake = () => {};

async function onMessage({ topic: name, message }) {
  let value;
  try { value = JSON.parse(message.value.toString('utf8')); } catch { return; }
  if (name === topic('memory.items') && value.chunk_event_id === chunkId) {
    items.set(value.event_id, value);
  } else if (name === topic('memory.updates') && value.cube_id === cubeId && value.cause_event_id) {
    const ceId = message.headers?.ce_id?.toString() ?? value.event_id;
    if (seen.has(ceId)) return;
    seen.add(ceId);
    causes.set(value.cause_event_id, [...(causes.get(value.cause_event_id) ?? []), value]);
  } else if (name === topic('replies')) {
    pending.get(value.correlation_id)?.(value);
  }
  wake();
}

async function until(ready, what) {
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => { wake = resolve; setTimeout(resolve, 500); });
  }
}

async function request(op, fields, sealed = null, key = null) {
  const plain = envelope({ op, reply_to: topic('replies'), correlation_id: randomUUID(),
    requester: 'memstream-node-example', ...fields });
  const req = sealed && key ? sealFields(plain, key, cubeId, sealed) : plain;
  let reply;
  pending.set(req.correlation_id, (r) => { reply = r; });
  await publish('requests', op === 'search' ? 'SearchRequest' : 'DataKeyRequest', req);
  await until(() => reply, `the reply to ${op} (is a worker running?)`);
  pending.delete(req.correlation_id);
  return reply;
}

// The cube's data key, unwrapped with our private key (null: the cube has none).
const rsaKeys = generateKeyPairSync('rsa', {
  modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' },
  privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
});
async function fetchKey() {
  const reply = await request('data_key', { public_key: rsaKeys.publicKey });
  if (!reply.ok) {
    console.log(`no data key: ${reply.error.type}: ${reply.error.message}`);
    return null;
  }
  const key = privateDecrypt({ key: rsaKeys.privateKey, padding: constants.RSA_PKCS1_OAEP_PADDING,
    oaepHash: 'sha256' }, Buffer.from(reply.result.wrapped_key, 'base64'));
  if (kidOf(key) !== reply.result.kid) throw new Error('the unwrapped key is not the one named');
  console.log(`data key ${reply.result.kid} of cube ${cubeId}: unwrapped (RSA-OAEP-256)`);
  return key;
}

async function main() {
  await Promise.all([producer.connect(), consumer.connect()]);
  await consumer.subscribe({
    topics: [topic('memory.items'), topic('memory.updates'), topic('replies')], fromBeginning: true,
  });
  await consumer.run({ eachMessage: onMessage });

  // 1. the key first, if the cube has one: what the person says then goes out sealed
  let key = await fetchKey();
  const said = [
    ['user', "I'm allergic to peanuts and I love Thai food."],
    ['assistant', 'Noted: green curry without peanuts, then.'],
    ['user', 'My sister Ines lives in Porto and teaches chemistry.'],
  ];
  const plainChunk = envelope({
    event_id: chunkId, session_id: 'node-example',
    messages: said.map(([role, content], i) => ({ id: `${chunkId}-${i}`, role, timestamp: now(), content })),
  });
  const chunk = key ? sealFields(plainChunk, key, cubeId, (event, seal) => ({
    ...event, messages: event.messages.map((m) => ({ ...m, content: seal(m.content) })),
  })) : plainChunk;
  await publish('conversations', 'ConversationChunk', chunk);
  console.log(`published chunk ${chunkId} to ${topic('conversations')} (cube ${cubeId}, ` +
    `${said.length} messages, ${key ? 'sealed' : 'plain'})`);

  // 2. wait until every memory the chunk became is announced (added, or merged into another)
  const facts = () => [...items.values()].filter((i) => i.memory_type !== 'EpisodicMemory');
  await until(() => facts().length > 0 && facts().length >= (facts()[0].count ?? 1)
    && [...items.keys()].every((id) => causes.has(id)), 'the chunk\'s memories');
  key ??= await fetchKey(); // a new cube has a key once the worker sealed its first record
  for (const [id, sealedItem] of items) {
    const item = openFields(sealedItem, key, cubeId);
    for (const sealedUpdate of causes.get(id).filter((u) => u.action === 'added')) {
      // v3: an added record may carry no snapshot; the text is then on the item it names
      const update = openFields(sealedUpdate, key, cubeId);
      const text = update.node?.memory ?? item.memory;
      console.log(`added ${update.node_id} [${update.memory_type ?? item.memory_type ?? 'LongTermMemory'}]: ${shown(text)}`);
    }
  }

  // 3. search (the query sealed when we hold the key, as any field a person said)
  const reply = openFields(await request('search', { query: opts.query, top_k: 5 },
    (event, seal) => ({ ...event, query: seal(event.query) }), key), key, cubeId);
  if (!reply.ok) throw new Error(`search refused: ${reply.error.type}: ${shown(reply.error.message)}`);
  const hits = reply.result.memories ?? [];
  console.log(`search ${JSON.stringify(opts.query)}: ${hits.length} hits`);
  for (const hit of hits) {
    const type = hit.item.metadata?.memory_type ?? 'LongTermMemory';
    console.log(`hit ${hit.score.toFixed(3)} [${type}] ${shown(hit.item.memory)}`);
  }
}

try {
  await main();
} catch (error) {
  console.error(`error: ${error.message}`);
  process.exitCode = 1;
} finally {
  await Promise.allSettled([consumer.disconnect(), producer.disconnect()]);
}
