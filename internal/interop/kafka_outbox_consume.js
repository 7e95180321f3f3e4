// Reads what inboxd's outbox relay published to a Kafka topic with a stock
// kafkajs consumer (no compression plug-ins), as a service consuming the
// outbox would: COUNT messages of TOPIC from its start, on BROKERS (a comma
// list). Prints one JSON line per message: partition, offset, key, headers
// (UTF-8 strings) and the value in base64, byte for byte. Exits 1, with the
// consumer's error, if it crashes or the messages do not all arrive within
// TIMEOUT_MS.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const brokers = (process.env.BROKERS || '').split(',').filter(Boolean);
const topic = process.env.TOPIC;
const count = Number(process.env.COUNT || '0');
const timeoutMs = Number(process.env.TIMEOUT_MS || '30000');
if (brokers.length === 0 || !topic || !(count > 0)) {
  console.error('need BROKERS, TOPIC and COUNT');
  process.exit(2);
}

async function main() {
  const kafka = new Kafka({ clientId: 'inboxd-interop', brokers, logLevel: logLevel.NOTHING, retry: { retries: 2 } });
  const consumer = kafka.consumer({ groupId: 'inboxd-interop-' + process.pid + '-' + Date.now() });
  let failure = null;
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const seen = [];
  consumer.on(consumer.events.CRASH, (e) => {
    failure = e.payload.error;
    done();
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      const headers = {};
      for (const [k, v] of Object.entries(message.headers || {})) {
        headers[k] = Buffer.isBuffer(v) ? v.toString('utf8') : String(v);
      }
      seen.push({
        partition,
        offset: message.offset,
        key: message.key === null ? null : message.key.toString('utf8'),
        headers,
        value: message.value === null ? null : message.value.toString('base64'),
      });
      if (seen.length >= count) done();
    },
  });
  const timer = setTimeout(() => {
    failure = failure || new Error(`read ${seen.length} of ${count} messages in ${timeoutMs} ms`);
    done();
  }, timeoutMs);
  await finished;
  clearTimeout(timer);
  await consumer.disconnect().catch(() => {});
  if (failure) {
    console.error(`${failure.name}: ${failure.message}`);
    process.exit(1);
  }
  for (const m of seen) console.log(JSON.stringify(m));
}

main().catch((e) => {
  console.error(`${e.name}: ${e.message}`);
  process.exit(1);
});
