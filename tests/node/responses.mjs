// The official Node openai client, at its default settings, against an
// oncegate: a conversation through responses.create, responses.stream,
// retrieve, inputItems.list and delete. It prints one JSON line of what
// it saw; tests/e2e (TestNodeSDK) checks it. Usage:
//   ONCEGATE_URL=http://127.0.0.1:8080/v1 ONCEGATE_KEY=sk-… node responses.mjs MODEL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.ONCEGATE_URL, apiKey: process.env.ONCEGATE_KEY });
const model = process.argv[2] ?? "chat";
const out = { texts: [], ids: [] };

const first = await client.responses.create({ model, input: "hello from node" });
out.texts.push(first.output_text);
out.ids.push(first.id);

const second = await client.responses.create({ model, input: "and then?", previous_response_id: first.id });
out.texts.push(second.output_text);
out.ids.push(second.id);

const stream = client.responses.stream({ model, input: "tell me more", previous_response_id: second.id });
let deltas = "";
const events = [];
stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
for await (const e of stream) events.push(e.type);
const third = await stream.finalResponse();
out.texts.push(third.output_text);
out.ids.push(third.id);
out.deltas = deltas;
out.events = [events[0], events[events.length - 1]];

const got = await client.responses.retrieve(second.id);
out.retrieved = got.output_text;
const items = await client.responses.inputItems.list(third.id);
out.inputItems = items.data.map((i) => i.content?.[0]?.text);
await client.responses.delete(third.id);
try {
  await client.responses.retrieve(third.id);
  out.afterDelete = 200;
} catch (e) {
  out.afterDelete = e.status;
  out.afterDeleteCode = e.code;
}
console.log(JSON.stringify(out));
