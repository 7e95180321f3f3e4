// Signs webhook deliveries with the npm svix and standardwebhooks
// libraries, as real senders do, POSTs them to inboxd's webhook listener
// and prints one JSON line per request: {"case", "status", "body"}.
//
// Environment: BASE (http://host:port/webhooks/), SECRET (whsec_ and
// padded base64: what Svix hands out), SECRET_UNPADDED (whsec_ and base64
// without its padding), SECRET_BARE (the base64 alone, no whsec_).
// Every delivery is sent twice, signed afresh (a new timestamp) as a
// sender's retry is: the second must be a duplicate.
"use strict";
const { Webhook: SvixWebhook } = require("svix");
const { Webhook: StandardWebhook } = require("standardwebhooks");

const base = process.env.BASE;

// svixHeaders signs as Svix does by default: svix-id, svix-timestamp,
// svix-signature (the names of a delivery that is not white-labelled).
function svixHeaders(secret, id, body) {
  const wh = new SvixWebhook(secret);
  const ts = new Date();
  const sig = wh.sign(id, ts, body);
  const h = { "svix-id": id, "svix-timestamp": String(Math.floor(ts.getTime() / 1000)), "svix-signature": sig };
  wh.verify(body, h); // svix's own verifier accepts what we send
  return h;
}

// standardHeaders signs per the specification (a white-labelled Svix
// account sends these names): webhook-id, webhook-timestamp,
// webhook-signature.
function standardHeaders(secret, id, body) {
  const wh = new StandardWebhook(secret);
  const ts = new Date();
  const sig = wh.sign(id, ts, body);
  const h = { "webhook-id": id, "webhook-timestamp": String(Math.floor(ts.getTime() / 1000)), "webhook-signature": sig };
  wh.verify(body, h);
  return h;
}

async function send(name, source, headers, body) {
  const res = await fetch(base + source, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const text = await res.text();
  console.log(JSON.stringify({ case: name, status: res.status, body: text.trim() }));
}

async function main() {
  const cases = [
    // name, source, signer, secret, message id
    ["svix-default", "svix", svixHeaders, process.env.SECRET, "msg_svix_default"],
    ["white-labelled", "svix", standardHeaders, process.env.SECRET, "msg_white_labelled"],
    ["unpadded", "unpadded", standardHeaders, process.env.SECRET_UNPADDED, "msg_unpadded"],
    ["unpadded-svix", "unpadded", svixHeaders, process.env.SECRET_UNPADDED, "msg_unpadded_svix"],
    ["bare", "bare", svixHeaders, process.env.SECRET_BARE, "msg_bare"],
    ["bare-standard", "bare", standardHeaders, process.env.SECRET_BARE, "msg_bare_standard"],
  ];
  for (const [name, source, sign, secret, id] of cases) {
    const body = JSON.stringify({ type: "invoice.paid", data: { case: name } });
    for (let attempt = 0; attempt < 2; attempt++) {
      await send(name, source, sign(secret, id, body), body);
    }
  }
  // Both families in one request: the id of one, the signature of the
  // other, each valid for the id it was made for.
  const body = JSON.stringify({ type: "invoice.paid", data: { case: "mixed" } });
  const svix = svixHeaders(process.env.SECRET, "msg_mixed", body);
  const std = standardHeaders(process.env.SECRET, "msg_mixed_other", body);
  await send("mixed", "svix", { "svix-id": svix["svix-id"], "svix-timestamp": svix["svix-timestamp"],
    "svix-signature": svix["svix-signature"], "webhook-id": std["webhook-id"] }, body);
  await send("mixed-signature", "svix", { "svix-id": svix["svix-id"], "svix-timestamp": svix["svix-timestamp"],
    "webhook-signature": svix["svix-signature"] }, body);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
