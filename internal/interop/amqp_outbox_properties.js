// Reads what inboxd's outbox relay published to RabbitMQ with amqplib, as a
// service consuming the outbox would: COUNT messages of QUEUE on AMQP_URL,
// each acknowledged. Prints one JSON line per message: amqplib's properties
// (contentType, contentEncoding, correlationId, replyTo, expiration,
// messageId, timestamp, type, deliveryMode, headers) and the body in
// base64. Exits 1 if the messages do not all arrive within TIMEOUT_MS.
'use strict';

const amqp = require('amqplib');

const url = process.env.AMQP_URL;
const queue = process.env.QUEUE;
const count = Number(process.env.COUNT || '0');
const timeoutMs = Number(process.env.TIMEOUT_MS || '30000');
if (!url || !queue || !(count > 0)) {
  console.error('need AMQP_URL, QUEUE and COUNT');
  process.exit(2);
}

async function main() {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  const seen = [];
  const deadline = Date.now() + timeoutMs;
  while (seen.length < count) {
    const msg = await ch.get(queue, { noAck: false });
    if (msg === false) {
      if (Date.now() > deadline) throw new Error(`read ${seen.length} of ${count} messages in ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    const headers = {};
    for (const [k, v] of Object.entries(msg.properties.headers || {})) {
      headers[k] = Buffer.isBuffer(v) ? v.toString('utf8') : v;
    }
    seen.push({ properties: { ...msg.properties, headers }, body: msg.content.toString('base64') });
    ch.ack(msg);
  }
  await ch.close();
  await conn.close();
  for (const m of seen) console.log(JSON.stringify(m));
}

main().catch((e) => {
  console.error(`${e.name}: ${e.message}`);
  process.exit(1);
});
